//===- MatchGates.h - the known router forms --------------------*- C++ -*-===//
//
// Matchers of the gates moe.router computes, from the top-k that chooses the
// experts: softmax or sigmoid scores, a selection-only bias, DeepSeek-V3's
// grouped selection, and the routing weights (the chosen scores, optionally
// renormalised over k and scaled). The loop detector and the generic gate
// (matchLayerGate) share them, so that a gate is known in every form the
// experts take. Also the constant predicates they need.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_MATCHGATES_H
#define MOEC_PASSES_MATCHGATES_H

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>
#include <vector>

namespace moec {

/// Whether `value` is a single integer constant equal to `expected`.
bool isConstInt(mlir::Value value, int64_t expected);

/// An i64 constant of `shape` holding `values`, made at `builder`'s
/// insertion point.
mlir::Value createI64Constant(mlir::OpBuilder &builder, mlir::Location loc,
                              llvm::ArrayRef<int64_t> shape,
                              llvm::ArrayRef<int64_t> values);

/// A ranked type of rank 2 whose second dimension is static `dim1`.
bool isMatrixWithCols(mlir::Value value, int64_t dim1);

/// Strips reshapes between `[n, cols]` matrices: element counts match, so
/// the rows and their contents are unchanged.
mlir::Value stripMatrixReshapes(mlir::Value value, int64_t cols);

/// Whether `value` is a `constant_of_shape` filled with float zeros.
moe::ConstantOfShapeOp getZeros(mlir::Value value);

/// Whether `zeros` holds float zeros of `like`'s shape:
/// `constant_of_shape(shape(like))`, or a constant of zeros with `like`'s
/// static type (what the first folds to when the export's shapes are
/// static, e.g. torch.onnx.export without dynamic axes).
bool isZerosShapedLike(mlir::Value zeros, mlir::Value like);

/// The bytes of a constant, or nullopt where they are not directly readable.
/// `storage` keeps expanded splats alive.
std::optional<llvm::ArrayRef<char>> getWeightBytes(moe::ConstantOp constant,
                                                   std::vector<char> &storage);

/// The elements of an f32 constant of at most `maxElements` elements (so
/// that probing an operand never copies a weight), or nullopt.
std::optional<llvm::SmallVector<float>> getConstantFloats(mlir::Value value,
                                                          int64_t maxElements);

/// Whether `value` is a one-element f32 constant equal to `expected`.
bool isConstFloat(mlir::Value value, float expected);

/// Whether the axis attribute `axis` (as stored: a signed value in an
/// unsigned getter) names the last axis of a `rank`-D tensor.
bool isLastAxis(uint64_t axis, int64_t rank);

/// Whether `op` selects the largest entries along the last axis of its
/// `rank`-D input.
bool isLargestOnLastAxis(moe::TopKOp op, int64_t rank);

/// The shape operand of `value` when it is a float tensor of `fill`
/// everywhere: `expand(fill, shape)` (a one-element constant) or
/// `constant_of_shape(shape)` of `fill` (zero when no value is given, as in
/// ONNX); null otherwise.
mlir::Value getFillShape(mlir::Value value, float fill);

/// A gate of the forms moe.router computes, as matched.
struct KnownGate {
  /// The router's logits and its scores (their softmax or sigmoid).
  mlir::Value logits, scores;
  moe::ScoreFunction score = moe::ScoreFunction::Softmax;
  /// The selection-only bias (`[E]` floats), empty when absent.
  llvm::SmallVector<float> bias;
  int64_t nGroup = 1, topkGroup = 1;
  /// The top-k ops of grouped selection, part of this gate.
  llvm::SmallVector<moe::TopKOp> groupTopKs;
  /// The choice score grouped selection gives experts of dropped groups.
  float maskFill = 0.0f;
  bool normalize = false;
  float scale = 1.0f;
  /// The top-k is of the logits themselves, and the weights are the softmax
  /// of the k chosen logits (Mistral's reference code, Granite).
  bool afterTopK = false;
};

/// Matches what `topK` chooses from: `softmax(logits)`, sigmoid scores
/// chosen by `c = s [+ bias]`, optionally restricted to the best expert
/// groups (DeepSeek-V3), or the logits (a projection of the tokens) whose
/// chosen k matchGateWeights then expects a softmax over. Returns why it is
/// none of them.
std::optional<std::string> matchGateScores(moe::TopKOp topK, KnownGate &gate);

/// Matches `gathered` as the routing weights of the gate matchGateScores
/// found at `topK`: the chosen scores (the top-k values, or the scores
/// gathered at the top-k indices where a bias or groups chose them),
/// optionally renormalised over k (`w / (reduce_sum(w, -1, keepdims)
/// [+ 1e-20])`), then optionally scaled by a constant.
std::optional<std::string> matchGateWeights(mlir::Value gathered,
                                            moe::TopKOp topK, KnownGate &gate);

/// Adds the patterns that give gate code's shapes computed from the tokens'
/// row count their constant form (passes/CanonicalizeGates.cpp), which the
/// gate patterns and the expert patterns after them need static.
void populateGateShapePatterns(mlir::RewritePatternSet &patterns);

/// Adds the patterns that rewrite gate code's idioms into the forms
/// matchGateScores and matchGateWeights prove (passes/CanonicalizeGates.cpp).
void populateGatePatterns(mlir::RewritePatternSet &patterns);

} // namespace moec

#endif // MOEC_PASSES_MATCHGATES_H
