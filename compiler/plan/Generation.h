//===- Generation.h - Finding the KV caches of generation graphs -*- C++
//-*-===//
//
// `moec compile DECODE.onnx [--prefill PREFILL.onnx] --max-seq S` compiles a
// generation plan (docs/plan-format.md, "Generation plans"). This finds, on
// the imported graphs, what the runtime's Generator needs to run them: the
// key/value cache pairs (a graph input `[b, h, past, d]` concatenated along
// `past` into a graph output; names are only a hint), the token ids and
// positions inputs and the logits output.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_GENERATION_H
#define MOEC_COMPILER_PLAN_GENERATION_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::plan {

/// One cache: decode input `input` grows along `axis` into decode output
/// `output`; the prefill's output `prefillOutput` starts it.
struct CachePairInfo {
  std::string input;
  std::string output;
  std::string prefillOutput;
  int layer = 0;
  int axis = 0;
  /// The ONNX dim_param of the input's sequence dimension ("" if unnamed).
  std::string pastDimParam;
  /// A fixed-size state `output` replaces each step (no axis; a prefill
  /// only from a first prompt, which starts from a zero state).
  bool state = false;
};

/// What the plan's generation table records.
struct GenerationSignature {
  int64_t maxSeq = 0;
  std::string inputIds;
  /// Empty where the graph has no positions input.
  std::string positionIds;
  /// The attention mask input (i64 [1, past + n], all ones), or empty.
  std::string attentionMask;
  /// The ONNX dim_param of the mask's length ("" if unnamed).
  std::string attentionMaskDimParam;
  /// The model's end-of-sequence ids (from genai_config.json), or none.
  std::vector<int64_t> eosIds;
  std::string logits;
  std::vector<CachePairInfo> cache;
  /// The prefill's dim_param of the sequence dimension of its token ids
  /// (the decode graph's, for a single graph).
  std::string prefillSeqDimParam;
  /// No prefill graph: the decode graph runs the prompt with empty pasts,
  /// so their symbols start at 0 (getPastSymbols).
  bool singleGraph = false;
};

/// The ONNX name of argument (result) `index` of `func` (`moe.name`), else
/// "argN" ("resultN").
std::string getArgName(mlir::func::FuncOp func, unsigned index);
std::string getResultName(mlir::func::FuncOp func, unsigned index);

/// Specializes the graph inputs of `module` to what a generator feeds: the
/// batch (the named dimension 0 of the i64 [batch, n] token inputs, and
/// every input dimension of that name) becomes 1, and each past that a
/// graph output concatenates new entries onto takes their other dimensions
/// (onnxruntime-genai exports name the head size as a symbol too). The
/// passes refine the rest of the graph from there.
void specializeForGeneration(mlir::ModuleOp module);

/// Removes from `module`'s graph each input that it returns unchanged as
/// the output of its cache name (`input.X` as `output.X`) and reads nowhere
/// else, with those outputs: a state that no computation reads, whatever
/// its value (transformers' `_sliding_window_tensor`, the window size that
/// a chunked or sliding layer's cache carries through the exported graphs,
/// which compute the window from the positions). Returns their names.
std::vector<std::string> dropPassThroughStates(mlir::ModuleOp module);

/// What findGenerationSignature is to expect besides the usual.
struct GenerationSearch {
  /// Decode graph inputs that something else feeds (a multimodal plan's
  /// decode feeds): neither tokens, positions nor caches.
  std::vector<std::string> otherInputs;
  /// The prompt runs through graphs of their own (a multimodal plan's
  /// stages, matched by matchPrefillCaches): without `prefill` the decode
  /// graph is not a single graph that also runs the prompt.
  bool stagedPrefill = false;
  /// `prefill` is the decode graph imported as a first prompt
  /// (onnx_import::ImportOptions::firstPrompt), whose states start from
  /// zeros: state pairs may then have a prefill output.
  bool firstPromptPrefill = false;
};

/// Finds the signature of the imported decode graph `decode` (from
/// `decodePath`) and, unless null, of its prefill graph `prefill` (from
/// `prefillPath`). Reports, located at the file, a graph without cache
/// pairs, inputs the generator cannot feed, and pairs whose shapes disagree
/// between the two graphs.
mlir::FailureOr<GenerationSignature>
findGenerationSignature(mlir::ModuleOp decode, llvm::StringRef decodePath,
                        mlir::ModuleOp prefill, llvm::StringRef prefillPath,
                        int64_t maxSeq, const GenerationSearch &search = {});

/// Sets each pair's `prefillOutput` of `sig` (the decode graph `decode`'s)
/// to the output of `prefill` (from `prefillPath`) that starts it, among
/// the outputs but `skip`: by name stem first, else in order, with shapes
/// that agree but for the pair's axis. Reports a count or shape mismatch.
mlir::LogicalResult matchPrefillCaches(mlir::ModuleOp decode,
                                       mlir::ModuleOp prefill,
                                       llvm::StringRef prefillPath,
                                       llvm::ArrayRef<std::string> skip,
                                       GenerationSignature &sig);

/// The plan symbols of the pasts' sequence dimensions (as the plan emitter
/// names them: the dim_param, else "<input>.<axis>").
std::vector<std::string> getPastSymbols(const GenerationSignature &sig);

/// The --bound NAME=N bounds that size a generation plan's symbolic
/// dimensions for `maxSeq`: the decode's past at maxSeq - 1 and the
/// prefill's sequence at maxSeq - 1 (one new token at least).
std::vector<std::string> getGenerationBounds(const GenerationSignature &sig,
                                             bool prefill);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_GENERATION_H
