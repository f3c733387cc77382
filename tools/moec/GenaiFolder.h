//===- GenaiFolder.h - onnxruntime-genai model folders ----------*- C++ -*-===//
//
// `moec compile MODEL_DIR` takes the folder onnxruntime-genai's model builder
// writes: genai_config.json names the decoder's ONNX file and the sequence
// length it was built for. The folder's tokenizer files are copied beside the
// plan, into PLAN.tokenizer/, for a serving layer (docs/cli.md).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_GENAIFOLDER_H
#define MOEC_TOOLS_MOEC_GENAIFOLDER_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec {

/// What moec reads from a builder folder's genai_config.json.
struct GenaiFolder {
  /// The decoder's ONNX file, inside the folder.
  std::string modelPath;
  /// search.max_length, else model.context_length: the longest sequence.
  uint64_t maxLength = 0;
  /// model.type ("gptoss", "qwen3_5_moe", ...).
  std::string modelType;
  /// model.eos_token_id, one or several.
  std::vector<int64_t> eosTokenIds;
  /// The folder's tokenizer files present (names of kTokenizerFiles), each
  /// checked: a regular file (not a link), at most kMaxTokenizerFileBytes.
  std::vector<std::string> tokenizerFiles;
  /// The folder itself.
  std::string dir;
};

/// The tokenizer files a folder may hold, the ones copied beside a plan: the
/// Hugging Face tokenizer, its configuration (special tokens, often the chat
/// template), the special tokens map, and a separate chat template.
inline constexpr const char *kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "chat_template.jinja", "chat_template.json"};

/// The largest tokenizer file taken (the largest tokenizer.json published is
/// a few tens of MiB).
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t(256) << 20;

/// Whether `path` is a folder with a genai_config.json.
bool isGenaiFolder(llvm::StringRef path);

/// Reads `dir`/genai_config.json. On failure returns false and sets `error`
/// to one message naming the file and the field.
bool readGenaiFolder(llvm::StringRef dir, GenaiFolder &folder,
                     std::string &error);

/// Returns the folder beside `planPath` that copyTokenizerFiles fills:
/// `planPath` + ".tokenizer".
std::string getTokenizerDir(llvm::StringRef planPath);

/// Copies `folder`'s tokenizer files into getTokenizerDir(planPath), created
/// if absent; a tokenizer file of kTokenizerFiles left there by an earlier
/// compile that the folder no longer has is removed. Nothing happens when the
/// folder has none. On failure returns false and sets `error`.
bool copyTokenizerFiles(const GenaiFolder &folder, llvm::StringRef planPath,
                        std::string &error);

} // namespace moec

#endif // MOEC_TOOLS_MOEC_GENAIFOLDER_H
