//===- MultimodalFolder.cpp - Vision-language export folders --------------===//

#include "tools/moec/MultimodalFolder.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

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
  uint64_t size = 0;
  if (sys::fs::file_size(path, size))
    return fail("not a readable file");
  if (size > kMaxConfigBytes)
    return fail("is " + Twine(size) + " bytes; a config.json is at most " +
                Twine(kMaxConfigBytes));
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(path);
  if (!buffer)
    return fail(buffer.getError().message());
  Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    return fail("invalid JSON: " + toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return fail("is not a JSON object");
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
  if (!sections)
    return true;
  for (const json::Value &section : *sections)
    if (!section.getAsInteger() || *section.getAsInteger() < 0)
      return fail("text_config's mrope_section holds a value that is not a "
                  "non-negative integer");
  folder.config.mropeSections = sections->size();
  return true;
}

} // namespace moec
