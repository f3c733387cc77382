//===- Multimodal.h - The stages and feeds of a multimodal plan -*- C++ -*-===//
//
// `moec compile DIR --max-seq S` over a vision-language export (the
// component graphs transformers' exporters write, docs/multimodal.md)
// compiles a multimodal generation plan (docs/plan-format.md, "Multimodal
// plans"): the decode graph as a generation plan's decode schedule, and the
// vision encoder, the token embedding, the language model (the prefill) and
// its head as stages. This finds, on the imported graphs, how each stage's
// inputs are fed: by their types and shapes first, their names where the
// types cannot tell.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_MULTIMODAL_H
#define MOEC_COMPILER_PLAN_MULTIMODAL_H

#include "compiler/plan/Generation.h"
#include "format/plan_generated.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringSet.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::plan {

/// What the model's config says (config.json, read by the tool).
struct MultimodalConfig {
  int64_t imageTokenId = -1;
  /// vision_config.spatial_merge_size; 0 where the config has none.
  int64_t spatialMergeSize = 0;
  /// The number of M-RoPE sections (mrope_section): 3 for (t, h, w); 0
  /// where the config has none.
  size_t mropeSections = 0;
  /// The grid rule's position table (docs/multimodal.md, "Vision inputs
  /// from the grid"): its side (sqrt of vision_config's
  /// num_position_embeddings, 0 when absent) and, when the vision model's
  /// family is known (`gridFamily` names it), how it is resampled.
  int64_t tableSide = 0;
  std::string gridFamily;
  moert::fb::GridInterpolation interpolation =
      moert::fb::GridInterpolation::Bilinear;
  bool alignCorners = false;
  /// The folder's preprocessor_config.json, when it has one.
  bool hasProcessor = false;
  moert::fb::ImageProcessorT processor;
};

/// One feed of a graph input (plan.fbs `Feed`).
struct StageFeed {
  std::string input;
  moert::fb::FeedKind kind = moert::fb::FeedKind::Given;
  int stage = -1;
  std::string output;
};

/// One component graph, imported; `feeds` filled by findMultimodalSignature.
struct StageGraph {
  std::string name;
  std::string path;
  moert::fb::StageRole role = moert::fb::StageRole::Vision;
  mlir::ModuleOp module;
  std::vector<StageFeed> feeds;
};

/// What the plan's Multimodal table records besides the stages.
struct MultimodalSignature {
  int64_t imageTokenId = 0;
  int imageFeaturesStage = -1;
  std::string imageFeatures;
  int logitsStage = -1;
  std::string logits;
  std::vector<moert::fb::PositionRow> positionRows;
  int64_t spatialMergeSize = 1;
  std::string imageGrid;
  int64_t maxImages = 0;
  std::vector<StageFeed> decodeFeeds;
  /// The grid rule's parameters, for plans with Grid* feeds.
  moert::fb::GridRuleT gridRule;
  /// The image processor, with its pixel input, when the folder has one.
  bool hasProcessor = false;
  moert::fb::ImageProcessorT processor;
};

/// The inputs of the imported decode graph `decode` that a multimodal plan
/// feeds from the new token itself (transformers' mm_token_type_ids: i64
/// [1, n] with "type" in the name; a bool [1, n] image mask), for
/// GenerationSearch::otherInputs.
std::vector<std::string> getDecodeTokenFeeds(mlir::ModuleOp decode);

/// Finds every stage's feeds (`stages` in order: Vision ones, Embed,
/// Prefill, then an optional Head), the table's names and the position
/// rule, and sets `sig`'s pairs' prefill outputs to the Prefill stage's.
/// A Vision stage after the first (a projector) reads the one output of
/// the stage before it that fits each input; where that output is
/// [b, t, W] and the input [m, W], the input is made to take it and
/// flatten it (the model's view(-1, W) between the two graphs). Positions
/// i64 [1, n] are the tokens' indices (no rows); [3 or 4, 1, n] M-RoPE's,
/// which need the config's fields and a grid input. Reports, at the
/// graph's file, an input no feed fits, an output that cannot be told
/// apart, or a config the rule cannot follow.
mlir::FailureOr<MultimodalSignature>
findMultimodalSignature(std::vector<StageGraph> &stages, mlir::ModuleOp decode,
                        llvm::StringRef decodePath,
                        const MultimodalConfig &config,
                        GenerationSignature &sig);

/// Makes the decoder `decode` (from `decodePath`), whose input
/// `embedsInput` is the token embeddings f32 [b, n, H] (onnxruntime-genai's
/// exclude_embeds decoder), take the token ids instead: an input named as
/// the embedding graph's `idsInput`, i64 [b, n], looked up in that graph's
/// table (its one Gather of a constant [vocab, H] by the ids), which a
/// decode step's embedding is (it has no image features). Reports a
/// missing input or an embedding graph without such a lookup.
mlir::LogicalResult takeTokenIds(mlir::ModuleOp decode,
                                 llvm::StringRef decodePath,
                                 llvm::StringRef embedsInput,
                                 const StageGraph &embed,
                                 llvm::StringRef idsInput);

/// Fixes every input dimension of `module` whose ONNX dim_param is a NAME
/// of `dims` (NAME=N) to N, as onnxruntime's free dimension overrides do:
/// the passes refine the graph from there. Adds the names it used to
/// `used`.
void fixInputDims(mlir::ModuleOp module, llvm::ArrayRef<std::string> dims,
                  llvm::StringSet<> &used);

/// Drops the feeds of inputs that the compiled stages no longer take (an
/// input the graph never reads is not the plan's).
void pruneFeeds(std::vector<StageGraph> &stages);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_MULTIMODAL_H
