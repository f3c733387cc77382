//===- MultimodalFolder.cpp - Vision-language export folders --------------===//

#include "tools/moec/MultimodalFolder.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>

using namespace llvm;

namespace moec {
namespace {

/// A config.json is a few KiB; anything far larger is not one.
constexpr uint64_t kMaxConfigBytes = 1 << 20;

std::string joinPath(StringRef dir, StringRef name) {
  SmallString<256> path(dir);
  sys::path::append(path, name);
  return std::string(path);
}

/// Reads the JSON object at `path` (a config of at most kMaxConfigBytes)
/// into `out`; else sets `error` to one message naming the file.
bool readJsonObject(StringRef path, json::Value &out, std::string &error) {
  auto fail = [&](const Twine &message) {
    error = (path + ": " + message).str();
    return false;
  };
  uint64_t size = 0;
  if (sys::fs::file_size(path, size))
    return fail("not a readable file");
  if (size > kMaxConfigBytes)
    return fail("is " + Twine(size) + " bytes; a config is at most " +
                Twine(kMaxConfigBytes));
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(path);
  if (!buffer)
    return fail(buffer.getError().message());
  Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    return fail("invalid JSON: " + toString(parsed.takeError()));
  if (!parsed->getAsObject())
    return fail("is not a JSON object");
  out = std::move(*parsed);
  return true;
}

/// The grid rule's config fields: the position table's side and the
/// family's interpolation (transformers' Qwen3-VL vision models resample
/// their table bilinearly with align_corners).
void readGridConfig(const json::Object &root, const json::Object *vision,
                    plan::MultimodalConfig &config) {
  std::optional<int64_t> entries =
      vision ? vision->getInteger("num_position_embeddings") : std::nullopt;
  if (entries && *entries > 0) {
    int64_t side = static_cast<int64_t>(
        std::llround(std::sqrt(static_cast<double>(*entries))));
    if (side * side == *entries)
      config.tableSide = side;
  }
  std::optional<StringRef> type =
      vision ? vision->getString("model_type") : std::nullopt;
  if (!type)
    type = root.getString("model_type");
  StringRef family = type.value_or("");
  family.consume_back("_vision");
  for (StringRef known : {"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})
    if (family == known) {
      config.gridFamily = known.str();
      config.interpolation = moert::fb::GridInterpolation::Bilinear;
      config.alignCorners = true;
    }
}

/// Reads DIR/preprocessor_config.json, when there, into `config.processor`:
/// the Qwen2-VL image processor's fields (docs/multimodal.md, "Images"),
/// GLM-4V's sizing and Llama 4's tiles where `image_processor_type` names
/// their processors.
bool readProcessor(StringRef dir, plan::MultimodalConfig &config,
                   std::string &error) {
  std::string path = joinPath(dir, "preprocessor_config.json");
  if (!sys::fs::exists(path))
    return true;
  auto fail = [&](const Twine &message) {
    error = path + ": " + message.str();
    return false;
  };
  json::Value parsed(nullptr);
  if (!readJsonObject(path, parsed, error))
    return false;
  const json::Object *root = parsed.getAsObject();
  moert::fb::ImageProcessorT &p = config.processor;
  auto integer = [&](StringRef key, int64_t &out, int64_t lo, int64_t hi) {
    std::optional<int64_t> v = root->getInteger(key);
    if (!v || *v < lo || *v > hi)
      return fail(key + " is missing or not an integer in [" + Twine(lo) +
                  ", " + Twine(hi) + "]");
    out = *v;
    return true;
  };
  auto flag = [&](StringRef key, bool &out) {
    out = root->getBoolean(key).value_or(true);
  };
  // The rule by the processor's class (its fast or PIL form alike); none
  // named: Qwen2-VL's.
  if (const json::Value *type = root->get("image_processor_type")) {
    std::optional<StringRef> name = type->getAsString();
    if (name && name->starts_with("Glm4vImageProcessor"))
      p.resize = moert::fb::ImageResize::Glm4v;
    else if (name && name->starts_with("Llama4ImageProcessor"))
      p.resize = moert::fb::ImageResize::Llama4Tiles;
    else if (!name || !(name->starts_with("Qwen2VLImageProcessor") ||
                        name->starts_with("Qwen2_5_VLImageProcessor") ||
                        name->starts_with("Qwen3VLImageProcessor")))
      return fail("image_processor_type " +
                  (name ? "'" + name->str() + "'" : std::string("(not text)")) +
                  " is no image processor the rule knows "
                  "(Qwen2VLImageProcessor, Glm4vImageProcessor, "
                  "Llama4ImageProcessor)");
  }
  bool tiles = p.resize == moert::fb::ImageResize::Llama4Tiles;
  flag("do_resize", p.do_resize);
  flag("do_rescale", p.do_rescale);
  flag("do_normalize", p.do_normalize);
  if (tiles) {
    // Llama 4: square tiles of size.height, at most max_patches of them,
    // bilinear (transformers' Llama4ImageProcessor, which always resizes).
    const json::Object *size = root->getObject("size");
    std::optional<int64_t> height = size ? size->getInteger("height") : 0;
    std::optional<int64_t> width = size ? size->getInteger("width") : 0;
    if (!height || !width || *height < 1 || *height > 1024 || *width != *height)
      return fail("size.height and size.width are missing or not one tile "
                  "side in [1, 1024]");
    p.patch_size = *height;
    p.temporal_patch_size = 1;
    p.max_tiles = root->getInteger("max_patches").value_or(16);
    if (p.max_tiles < 1 || p.max_tiles > 1024)
      return fail("max_patches " + Twine(p.max_tiles) + " is not in [1, 1024]");
    p.resize_to_max_canvas =
        root->getBoolean("resize_to_max_canvas").value_or(false);
    if (!p.do_resize)
      return fail("do_resize is false, which Llama4ImageProcessor refuses");
    if (root->getInteger("resample").value_or(2) != 2)
      return fail("resample " + Twine(*root->getInteger("resample")) +
                  " is not 2 (bilinear), the only resize Llama 4's rule "
                  "knows");
  }
  int64_t merge = 0;
  if (!tiles &&
      (!integer("patch_size", p.patch_size, 1, 1024) ||
       !integer("temporal_patch_size", p.temporal_patch_size, 1, 64) ||
       !integer("merge_size", merge, 1, 1024)))
    return false;
  if (!tiles && merge != config.spatialMergeSize)
    return fail(
        "merge_size " + Twine(merge) +
        " differs from config.json's vision_config.spatial_merge_size " +
        Twine(config.spatialMergeSize));
  // The pixel bounds: size.shortest_edge / longest_edge (transformers 5),
  // or min_pixels / max_pixels.
  const json::Object *sizes = root->getObject("size");
  std::optional<int64_t> lo = sizes ? sizes->getInteger("shortest_edge")
                                    : root->getInteger("min_pixels");
  std::optional<int64_t> hi = sizes ? sizes->getInteger("longest_edge")
                                    : root->getInteger("max_pixels");
  if (p.do_resize && !tiles &&
      (!lo || !hi || *lo < 1 || *hi < *lo || *hi > (1LL << 40)))
    return fail("size.shortest_edge and size.longest_edge (or min_pixels and "
                "max_pixels) are missing or no range of pixel counts");
  p.min_pixels = lo.value_or(0);
  p.max_pixels = hi.value_or(0);
  if (std::optional<int64_t> resample = root->getInteger("resample"))
    if (p.do_resize && !tiles && *resample != 3)
      return fail("resample " + Twine(*resample) +
                  " is not 3 (bicubic), the only resize the rule knows");
  p.rescale_factor = root->getNumber("rescale_factor").value_or(1.0 / 255);
  for (auto [key, out] : {std::pair("image_mean", &p.image_mean),
                          std::pair("image_std", &p.image_std)}) {
    const json::Array *values = root->getArray(key);
    if (!values || values->size() != 3)
      return fail(Twine(key) + " is missing or not 3 numbers");
    for (const json::Value &v : *values) {
      if (!v.getAsNumber() ||
          (StringRef(key) == "image_std" && *v.getAsNumber() == 0))
        return fail(Twine(key) + " holds a value that is not a number" +
                    (StringRef(key) == "image_std" ? " other than 0" : ""));
      out->push_back(*v.getAsNumber());
    }
  }
  config.hasProcessor = true;
  return true;
}

} // namespace

bool isMultimodalFolder(StringRef path) {
  if (!sys::fs::is_directory(path) ||
      !sys::fs::is_regular_file(joinPath(path, "config.json")))
    return false;
  for (const char *graph :
       {"image_encoder.onnx", "multi_modal_projector.onnx", "embed.onnx",
        "language_model.onnx", "lm_head.onnx", "decode.onnx"})
    if (sys::fs::exists(joinPath(path, graph)))
      return true;
  return false;
}

bool readMultimodalFolder(StringRef dir, MultimodalFolder &folder,
                          std::string &error) {
  folder.dir = dir.str();
  for (auto [field, name, required] :
       {std::tuple(&folder.imageEncoder, "image_encoder.onnx", true),
        std::tuple(&folder.projector, "multi_modal_projector.onnx", false),
        std::tuple(&folder.embed, "embed.onnx", true),
        std::tuple(&folder.languageModel, "language_model.onnx", true),
        std::tuple(&folder.lmHead, "lm_head.onnx", false),
        std::tuple(&folder.decode, "decode.onnx", true)}) {
    std::string path = joinPath(dir, name);
    if (sys::fs::is_regular_file(path)) {
      *field = path;
      continue;
    }
    if (required) {
      error = path + ": missing; a vision-language folder has "
                     "image_encoder.onnx, embed.onnx, language_model.onnx "
                     "and decode.onnx (multi_modal_projector.onnx and "
                     "lm_head.onnx optional)";
      return false;
    }
  }
  std::string path = joinPath(dir, "config.json");
  auto fail = [&](const Twine &message) {
    error = path + ": " + message.str();
    return false;
  };
  json::Value parsed(nullptr);
  if (!readJsonObject(path, parsed, error))
    return false;
  const json::Object *root = parsed.getAsObject();
  std::optional<int64_t> image = root->getInteger("image_token_id");
  if (!image)
    image = root->getInteger("image_token_index");
  if (!image || *image < 0)
    return fail("image_token_id (or image_token_index) is missing or not a "
                "non-negative integer");
  folder.config.imageTokenId = *image;
  // M-RoPE's fields; a model without them (Llama 4) takes the tokens'
  // indices as positions.
  const json::Object *vision = root->getObject("vision_config");
  const json::Value *merge =
      vision ? vision->get("spatial_merge_size") : nullptr;
  if (merge && (!merge->getAsInteger() || *merge->getAsInteger() < 1 ||
                *merge->getAsInteger() > 1024))
    return fail("vision_config.spatial_merge_size is not an integer in "
                "[1, 1024]");
  folder.config.spatialMergeSize = merge ? *merge->getAsInteger() : 0;
  const json::Object *text = root->getObject("text_config");
  const json::Array *sections = nullptr;
  for (const char *rope : {"rope_parameters", "rope_scaling"})
    if (const json::Object *params = text ? text->getObject(rope) : nullptr)
      if (const json::Array *found = params->getArray("mrope_section"))
        sections = found;
  readGridConfig(*root, vision, folder.config);
  if (!readProcessor(dir, folder.config, error))
    return false;
  if (!sections)
    return true;
  for (const json::Value &section : *sections)
    if (!section.getAsInteger() || *section.getAsInteger() < 0)
      return fail("text_config's mrope_section holds a value that is not a "
                  "non-negative integer");
  folder.config.mropeSections = sections->size();
  return true;
}

bool readGenaiMultimodalFolder(const GenaiFolder &genai,
                               MultimodalFolder &folder, std::string &error) {
  const GenaiMultimodal &mm = *genai.multimodal;
  folder.dir = genai.dir;
  folder.imageEncoder = mm.visionPath;
  folder.embed = mm.embeddingPath;
  folder.languageModel = genai.modelPath;
  folder.decode = genai.modelPath;
  folder.config.imageTokenId = mm.imageTokenId;
  folder.config.spatialMergeSize = mm.spatialMergeSize;
  // onnxruntime-genai computes 3-row M-RoPE positions (t, h, w) for these
  // types (its ModelType::IsQwenVLFamily).
  for (StringRef type :
       {"fara", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe"})
    if (genai.modelType == type)
      folder.config.mropeSections = 3;
  folder.genai = genai;
  return readProcessor(genai.dir, folder.config, error);
}

} // namespace moec
