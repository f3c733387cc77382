//===- GenaiFolder.h - onnxruntime-genai model folders ----------*- C++ -*-===//
//
// `moec compile MODEL_DIR` takes the folder onnxruntime-genai's model builder
// writes: genai_config.json names the decoder's ONNX file and the sequence
// length it was built for.
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
};

/// Whether `path` is a folder with a genai_config.json.
bool isGenaiFolder(llvm::StringRef path);

/// Reads `dir`/genai_config.json. On failure returns false and sets `error`
/// to one message naming the file and the field.
bool readGenaiFolder(llvm::StringRef dir, GenaiFolder &folder,
                     std::string &error);

} // namespace moec

#endif // MOEC_TOOLS_MOEC_GENAIFOLDER_H
