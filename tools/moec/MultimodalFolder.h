//===- MultimodalFolder.h - Vision-language export folders ------*- C++ -*-===//
//
// `moec compile DIR --max-seq S` over a folder as transformers' exporters
// leave a vision-language model (docs/multimodal.md): the component graphs
// under their names and the model's config.json, whose fields drive the
// plan's feeds and position rule.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_MULTIMODALFOLDER_H
#define MOEC_TOOLS_MOEC_MULTIMODALFOLDER_H

#include "compiler/plan/Multimodal.h"
#include "tools/moec/GenaiFolder.h"

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace moec {

/// The graphs and config of a vision-language export folder.
struct MultimodalFolder {
  std::string dir;
  /// DIR/<name>.onnx; lmHead empty when the folder has none (the language
  /// model then gives the logits itself), projector when it has no
  /// multi_modal_projector.onnx (a second vision stage, Llama 4's).
  std::string imageEncoder, projector, embed, languageModel, lmHead, decode;
  plan::MultimodalConfig config;
  /// An onnxruntime-genai folder (readGenaiMultimodalFolder): `decode` and
  /// `languageModel` are its one decoder, which takes `genai->decoderEmbeds`
  /// and runs the prompt too; `embed` also takes the image features.
  std::optional<GenaiFolder> genai;
};

/// Whether `path` is a folder with a config.json and one of the component
/// graphs (image_encoder, embed, language_model, lm_head or decode .onnx);
/// readMultimodalFolder names any missing one.
bool isMultimodalFolder(llvm::StringRef path);

/// Reads the folder `dir`: its graphs (image_encoder, embed, language_model
/// and decode required, multi_modal_projector and lm_head optional) and
/// config.json's image_token_id (or image_token_index), and where present
/// vision_config.spatial_merge_size and text_config's mrope_section (in
/// rope_parameters or rope_scaling), which M-RoPE positions need, the grid
/// rule's vision_config.num_position_embeddings and model_type, and
/// preprocessor_config.json when the folder has one. On
/// failure returns false and sets `error` to one message naming the file
/// and the field.
bool readMultimodalFolder(llvm::StringRef dir, MultimodalFolder &folder,
                          std::string &error);

/// Fills `folder` from the genai folder `genai`, which has a vision
/// pipeline (GenaiFolder::multimodal): its vision, embedding and decoder
/// graphs, the image token and spatial merge of genai_config.json, 3 M-RoPE
/// sections for the Qwen-VL types onnxruntime-genai gives 3-row positions
/// (fara, qwen2_5_vl, qwen3_vl, qwen3_5, qwen3_5_moe), and
/// preprocessor_config.json when the folder has one. On failure returns
/// false and sets `error`.
bool readGenaiMultimodalFolder(const GenaiFolder &genai,
                               MultimodalFolder &folder, std::string &error);

} // namespace moec

#endif // MOEC_TOOLS_MOEC_MULTIMODALFOLDER_H
