//===- RoutingMatrix.h - [T, E] routing matrices and expert masks -*- C++
//-*-===//
//
// Dense-masked MoE code (GPT-OSS, Tutel, V-MoE) keeps a token's routing in a
// `[T, E]` matrix: its top-k weights scattered into zeros at its top-k
// indices. Loop code finds an expert's rows in an `[E, T, k]` one-hot mask of
// the top-k indices. The matchers and builders here are shared by the dense
// detector and the canonicalisation of routing-matrix loops.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_ROUTINGMATRIX_H
#define MOEC_PASSES_ROUTINGMATRIX_H

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/PatternMatch.h"

namespace moec {

/// The splat float `data` is filled with: a splat constant, a
/// `constant_of_shape` or the `expand` of a splat constant; `shapeValue`, when
/// given, gets the shape operand of the latter two (null for a constant).
std::optional<llvm::APFloat> getFillValue(mlir::Value data,
                                          mlir::Value *shapeValue = nullptr);

/// Whether `data` is all zeros of `scores`' shape: `constant_of_shape` or
/// the `expand` of a zero scalar, to `shape(scores)`.
bool isZerosLike(mlir::Value data, mlir::Value scores);

/// The routing matrix `matrix` as its parts: a `scatter_elements` along the
/// experts of the `[T, k]` `weights` at the indices of `topK` (over the last
/// axis of `[T, E]` scores) into zeros of the scores' shape. Top-k indices
/// are distinct within a row, so `matrix[t, ids[t, j]] = weights[t, j]` and
/// every other entry is zero. Null when `matrix` is not one.
struct RoutingMatrix {
  moe::TopKOp topK;
  mlir::Value weights;
  int64_t numExperts = 0;
};
std::optional<RoutingMatrix> matchRoutingMatrix(mlir::Value matrix);

/// The `[E, T, k]` i64 mask `transpose(one_hot(ids, E), [2, 0, 1])` of
/// `topK`'s indices over `experts`: the one an earlier rewrite made, or a
/// new one right after the top-k, so that every expert shares it.
mlir::Value getTopKExpertMask(mlir::PatternRewriter &rewriter, moe::TopKOp topK,
                              int64_t experts);

/// Whether every row of the 2-D boolean `mask` has at most one true entry:
/// `ids == e` or the one-hot mask's slice e, for the indices of a top-k
/// (distinct within a row), or a cast of either.
bool hasOneTruePerRow(mlir::Value mask);

/// Adds the rewrite of a loop over a routing matrix's columns (V-MoE: rows
/// `nonzero(R[:, e])`, weights `R[rows, e]`) into the one-hot mask form of
/// moe-detect-experts.
void populateRoutingColumnPatterns(mlir::RewritePatternSet &patterns);

/// Adds the rewrite of makeMoE's gate, the softmax of top-k logits scattered
/// into -inf (k <= 2), into the softmax of the k logits scattered into zeros,
/// a routing matrix (passes/MaskedSoftmaxGate.cpp).
void populateMaskedSoftmaxGatePatterns(mlir::RewritePatternSet &patterns);

/// Adds the rewrite of makeMoE's expert rows, the tokens of `any(ids == e,
/// -1)`, into the token column of `nonzero(ids == e)`'s pairs
/// (passes/CanonicalizeMasks.cpp).
void populateExpertMaskRowPatterns(mlir::RewritePatternSet &patterns);

/// Whether `a` and `b` provably have the same shape: each dimension traced
/// back through the ops that pass it on unchanged to the same source
/// (passes/CanonicalizeBatchRows.cpp).
bool haveSameShape(mlir::Value a, mlir::Value b);

/// Adds the rewrite of `out[mask] = v` exported as a ScatterND of every
/// element of a `[B, T]` mask's rows into the scatter of v's rows
/// (passes/CanonicalizeBatchRows.cpp); run before populateBatchRowPatterns.
void populateElementMaskScatterPatterns(mlir::RewritePatternSet &patterns);

/// Adds the rewrites that flatten makeMoE's `[B, T, ...]` top-k, routing
/// matrix, expert masks and row scatters onto `[B * T, ...]` tokens
/// (passes/CanonicalizeBatchRows.cpp).
void populateBatchRowPatterns(mlir::RewritePatternSet &patterns);

} // namespace moec

#endif // MOEC_PASSES_ROUTINGMATRIX_H
