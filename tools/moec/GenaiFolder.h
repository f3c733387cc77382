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
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moec {

/// The multimodal sections of a genai_config.json (onnxruntime-genai's
/// vision pipeline, docs/multimodal.md "onnxruntime-genai folders"): each
/// graph's file, inside the folder, and the names of what it exchanges.
struct GenaiMultimodal {
  /// model.vision: the encoder, its inputs (pixel_values and, for Qwen-VL
  /// types, image_grid_thw: the caller's) and its image_features output.
  std::string visionPath;
  /// (key, graph input name) of model.vision.inputs.
  std::vector<std::pair<std::string, std::string>> visionInputs;
  std::string visionFeatures;
  /// model.vision.spatial_merge_size (onnxruntime-genai's default 2).
  int64_t spatialMergeSize = 2;
  /// model.embedding: token ids and image features in, inputs_embeds out.
  std::string embeddingPath;
  std::string embeddingIds, embeddingFeatures, embeddingOutput;
  /// model.decoder.inputs.inputs_embeds: what the decoder takes instead of
  /// token ids (a builder export with exclude_embeds).
  std::string decoderEmbeds;
  /// model.image_token_id.
  int64_t imageTokenId = -1;
};

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
  /// The vision pipeline's sections, when model.vision is there.
  std::optional<GenaiMultimodal> multimodal;
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

/// Reads `dir`/genai_config.json, and its vision pipeline where model.vision
/// is there. On failure returns false and sets `error` to one message naming
/// the file and the field.
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
