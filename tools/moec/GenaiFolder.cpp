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
  std::optional<StringRef> filename = decoder->getString("filename");
  if (!filename || filename->empty())
    return fail("model.decoder.filename is missing or not a string");
  // The file must lie in the folder: a plain relative name, no "..".
  if (sys::path::is_absolute(*filename) ||
      llvm::any_of(
          make_range(sys::path::begin(*filename), sys::path::end(*filename)),
          [](StringRef part) { return part == ".."; }))
    return fail("model.decoder.filename '" + *filename +
                "' is not a file inside the folder");
  SmallString<256> modelPath(dir);
  sys::path::append(modelPath, *filename);
  folder.modelPath = std::string(modelPath);
  if (!sys::fs::is_regular_file(folder.modelPath))
    return fail("model.decoder.filename names '" + folder.modelPath +
                "', which is not a file");

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
