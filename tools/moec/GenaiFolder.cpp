//===- GenaiFolder.cpp - onnxruntime-genai model folders ------------------===//

#include "tools/moec/GenaiFolder.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace llvm;

namespace moec {
namespace {

/// genai_config.json is a few KiB; anything far larger is not one.
constexpr uint64_t kMaxConfigBytes = 1 << 20;

std::string joinPath(StringRef dir, StringRef name) {
  SmallString<256> path(dir);
  sys::path::append(path, name);
  return std::string(path);
}

std::string configPath(StringRef dir) {
  return joinPath(dir, "genai_config.json");
}

/// Finds the tokenizer files of `folder.dir` into `folder.tokenizerFiles`;
/// a present one must be a regular file (a link could name any file) of at
/// most kMaxTokenizerFileBytes.
bool findTokenizerFiles(GenaiFolder &folder, std::string &error) {
  for (const char *name : kTokenizerFiles) {
    std::string path = joinPath(folder.dir, name);
    sys::fs::file_status status;
    if (sys::fs::status(path, status, /*follow=*/false))
      continue; // absent
    if (status.type() != sys::fs::file_type::regular_file) {
      error = path + ": a tokenizer file must be a regular file, not a " +
              (status.type() == sys::fs::file_type::symlink_file
                   ? "symbolic link"
                   : "directory or special file");
      return false;
    }
    if (status.getSize() > kMaxTokenizerFileBytes) {
      error = path + ": is " + std::to_string(status.getSize()) +
              " bytes; a tokenizer file is at most " +
              std::to_string(kMaxTokenizerFileBytes);
      return false;
    }
    folder.tokenizerFiles.push_back(name);
  }
  return true;
}

/// Sets `path` to DIR/<section.filename>, which must be a file inside the
/// folder; else sets `error` naming `field`.
bool resolveFile(StringRef dir, const json::Object &section, StringRef field,
                 std::string &path, std::string &error) {
  auto fail = [&](const Twine &message) {
    error = configPath(dir) + ": " + field.str() + ".filename " + message.str();
    return false;
  };
  std::optional<StringRef> filename = section.getString("filename");
  if (!filename || filename->empty())
    return fail("is missing or not a string");
  // The file must lie in the folder: a plain relative name, no "..".
  if (sys::path::is_absolute(*filename) ||
      llvm::any_of(
          make_range(sys::path::begin(*filename), sys::path::end(*filename)),
          [](StringRef part) { return part == ".."; }))
    return fail("'" + *filename + "' is not a file inside the folder");
  path = joinPath(dir, *filename);
  if (!sys::fs::is_regular_file(path))
    return fail("names '" + path + "', which is not a file");
  return true;
}

/// The names of `section`.`kind` ("inputs" or "outputs"), in order, each a
/// non-empty string; else sets `error` naming the field.
bool readNames(StringRef dir, const json::Object &section, StringRef field,
               StringRef kind,
               std::vector<std::pair<std::string, std::string>> &names,
               std::string &error) {
  const json::Object *object = section.getObject(kind);
  if (!object) {
    error = (configPath(dir) + ": " + field + "." + kind +
             " is missing or not an object")
                .str();
    return false;
  }
  for (const auto &[key, value] : *object) {
    std::optional<StringRef> name = value.getAsString();
    if (!name || name->empty()) {
      error = (configPath(dir) + ": " + field + "." + kind + "." + key.str() +
               " is not a graph input or output name")
                  .str();
      return false;
    }
    names.push_back({key.str(), name->str()});
  }
  return true;
}

/// Reads model.vision, model.embedding and what the decoder and the plan
/// take of them; a section or name the plan cannot feed is an error naming
/// the field.
bool readMultimodal(StringRef dir, const json::Object &model,
                    GenaiMultimodal &mm, std::string &error) {
  auto fail = [&](const Twine &message) {
    error = configPath(dir) + ": " + message.str();
    return false;
  };
  for (const char *other : {"speech", "audio"})
    if (model.get(other))
      return fail("model." + Twine(other) +
                  ": the plan has no audio stage (only model.vision, "
                  "model.embedding and model.decoder)");
  const json::Object *vision = model.getObject("vision");
  const json::Object *embedding = model.getObject("embedding");
  if (!vision || !embedding)
    return fail(Twine("model.") + (vision ? "embedding" : "vision") +
                " is missing or not an object; a multimodal folder has "
                "model.vision, model.embedding and model.decoder");
  if (vision->get("adapter_filename"))
    return fail("model.vision.adapter_filename: vision adapters are not "
                "supported");
  if (!resolveFile(dir, *vision, "model.vision", mm.visionPath, error) ||
      !resolveFile(dir, *embedding, "model.embedding", mm.embeddingPath, error))
    return false;
  std::vector<std::pair<std::string, std::string>> visionIn, visionOut, embedIn,
      embedOut;
  if (!readNames(dir, *vision, "model.vision", "inputs", visionIn, error) ||
      !readNames(dir, *vision, "model.vision", "outputs", visionOut, error) ||
      !readNames(dir, *embedding, "model.embedding", "inputs", embedIn,
                 error) ||
      !readNames(dir, *embedding, "model.embedding", "outputs", embedOut,
                 error))
    return false;
  // The vision inputs are the caller's (moe-run --vision-input, --image).
  mm.visionInputs = visionIn;
  for (const auto &[key, name] : visionOut) {
    if (key != "image_features")
      return fail("model.vision.outputs." + key +
                  ": the plan feeds only image_features on");
    mm.visionFeatures = name;
  }
  if (mm.visionFeatures.empty())
    return fail("model.vision.outputs.image_features is missing");
  for (const auto &[key, name] : embedIn) {
    if (key == "input_ids")
      mm.embeddingIds = name;
    else if (key == "image_features")
      mm.embeddingFeatures = name;
    else
      return fail("model.embedding.inputs." + key +
                  ": the plan feeds the embedding only input_ids and "
                  "image_features");
  }
  for (const auto &[key, name] : embedOut) {
    if (key != "inputs_embeds")
      return fail("model.embedding.outputs." + key +
                  ": the plan feeds only inputs_embeds on");
    mm.embeddingOutput = name;
  }
  if (mm.embeddingIds.empty() || mm.embeddingFeatures.empty() ||
      mm.embeddingOutput.empty())
    return fail("model.embedding needs inputs.input_ids, "
                "inputs.image_features and outputs.inputs_embeds");
  const json::Object *decoder = model.getObject("decoder");
  const json::Object *inputs = decoder ? decoder->getObject("inputs") : nullptr;
  std::optional<StringRef> embeds =
      inputs ? inputs->getString("inputs_embeds") : std::nullopt;
  if (!embeds || embeds->empty())
    return fail("model.decoder.inputs.inputs_embeds is missing: the decoder "
                "of a multimodal folder takes the embedding's output (the "
                "model builder's --extra_options exclude_embeds=true)");
  mm.decoderEmbeds = embeds->str();
  if (const json::Value *merge = vision->get("spatial_merge_size")) {
    std::optional<int64_t> value = merge->getAsInteger();
    if (!value || *value < 1 || *value > 1024)
      return fail("model.vision.spatial_merge_size is not an integer in "
                  "[1, 1024]");
    mm.spatialMergeSize = *value;
  }
  std::optional<int64_t> image = model.getInteger("image_token_id");
  if (!image || *image < 0)
    return fail("model.image_token_id is missing or not a non-negative "
                "integer");
  mm.imageTokenId = *image;
  return true;
}

} // namespace

bool isGenaiFolder(StringRef path) {
  return sys::fs::is_directory(path) &&
         sys::fs::is_regular_file(configPath(path));
}

bool readGenaiFolder(StringRef dir, GenaiFolder &folder, std::string &error) {
  std::string path = configPath(dir);
  auto fail = [&](const Twine &message) {
    error = path + ": " + message.str();
    return false;
  };
  uint64_t size = 0;
  if (!sys::fs::is_regular_file(path) || sys::fs::file_size(path, size))
    return fail("not a readable file");
  if (size > kMaxConfigBytes)
    return fail("is " + Twine(size) +
                " bytes; a genai_config.json is at most " +
                Twine(kMaxConfigBytes));
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(path);
  if (!buffer)
    return fail(buffer.getError().message());
  Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    return fail("invalid JSON: " + toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  const json::Object *model = root ? root->getObject("model") : nullptr;
  const json::Object *decoder = model ? model->getObject("decoder") : nullptr;
  if (!decoder)
    return fail("has no object model.decoder");
  if (!resolveFile(dir, *decoder, "model.decoder", folder.modelPath, error))
    return false;

  auto positive = [](std::optional<int64_t> value) {
    return value && *value > 0 ? uint64_t(*value) : uint64_t(0);
  };
  const json::Object *search = root->getObject("search");
  folder.maxLength =
      positive(search ? search->getInteger("max_length") : std::nullopt);
  if (!folder.maxLength)
    folder.maxLength = positive(model->getInteger("context_length"));
  if (!folder.maxLength)
    return fail("has neither search.max_length nor model.context_length "
                "(a positive integer)");
  folder.modelType = model->getString("type").value_or("").str();
  if (const json::Value *eos = model->get("eos_token_id")) {
    if (std::optional<int64_t> one = eos->getAsInteger())
      folder.eosTokenIds.push_back(*one);
    else if (const json::Array *many = eos->getAsArray())
      for (const json::Value &id : *many)
        if (std::optional<int64_t> value = id.getAsInteger())
          folder.eosTokenIds.push_back(*value);
  }
  folder.dir = std::string(dir);
  if (model->get("vision") || model->get("embedding")) {
    folder.multimodal.emplace();
    if (!readMultimodal(dir, *model, *folder.multimodal, error))
      return false;
  }
  return findTokenizerFiles(folder, error);
}

std::string getTokenizerDir(StringRef planPath) {
  return (planPath + ".tokenizer").str();
}

bool copyTokenizerFiles(const GenaiFolder &folder, StringRef planPath,
                        std::string &error) {
  if (folder.tokenizerFiles.empty())
    return true;
  std::string dir = getTokenizerDir(planPath);
  auto fail = [&](const Twine &message) {
    error = message.str();
    return false;
  };
  sys::fs::file_status status;
  if (!sys::fs::status(dir, status, /*follow=*/false) &&
      status.type() != sys::fs::file_type::directory_file)
    return fail(dir + ": exists and is not a folder (moec writes the "
                      "tokenizer files there)");
  if (std::error_code ec = sys::fs::create_directories(dir))
    return fail(dir + ": cannot create the folder: " + ec.message());
  for (const char *name : kTokenizerFiles) {
    std::string target = joinPath(dir, name);
    // A link in the way would be written through: remove whatever is there.
    if (std::error_code ec =
            sys::fs::remove(target, /*IgnoreNonExisting=*/true))
      return fail(target + ": cannot replace it: " + ec.message());
    if (!llvm::is_contained(folder.tokenizerFiles, name))
      continue;
    if (std::error_code ec =
            sys::fs::copy_file(joinPath(folder.dir, name), target))
      return fail(target + ": cannot copy " + joinPath(folder.dir, name) +
                  ": " + ec.message());
  }
  return true;
}

} // namespace moec
