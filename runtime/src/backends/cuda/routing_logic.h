//===- routing_logic.h - Per-thread logic of routing kernels ----*- C++ -*-===//
//
// What one GPU thread of the Router, Dispatch, Combine and Gemm helper
// kernels computes, as MOERT_HD functions (hd.h): routing_kernels.cu maps
// thread indices to these calls, and cuda_routing_logic_test.cpp runs the
// same functions over every thread index of each launch ("emulated grid")
// against the CPU backend's kernels (runtime/src/kernels/router.cpp,
// dispatch.cpp).
//
// The semantics are the CPU kernels', step by step; only the launch shape
// differs:
//
//  * Router: one thread per token, through the router's logic that the CPU
//    kernel calls too (kernels/logic/routing.h). The softmax's maximum and
//    sum are passes over the token's logits, and each score is recomputed
//    from its logit when needed (deterministic, so every recomputation gives
//    the same value), so that no [E] array is needed. The chosen experts (at
//    most kRouterMaxTopK) and the kept groups (at most kRouterMaxGroups)
//    live in registers.
//  * Capacity: one thread per (sequence, expert), scanning its sequence in
//    the CPU's (choice, token) order (the shared dropOverCapacity); it only
//    rewrites entries that name its expert, so the threads never write the
//    same entry. The renormalisation over the kept choices (normalize_kept)
//    then takes one thread per token.
//  * Dispatch, a deterministic stable counting sort in four launches: per
//    chunk of kDispatchChunk assignments, each expert's count; per expert,
//    the exclusive prefix of its counts over the chunks and its total; the
//    offsets as the exclusive scan of the totals; per assignment its row,
//    offsets[e] + the chunk's base + the earlier same-expert assignments in
//    its chunk. Then the row copies, one thread per element.
//  * Combine: the inverse of `source` (the smallest row naming each
//    assignment, through atomicMin), a check that no other row names it, and
//    one thread per output element summing its k contributions in order.
//
// Products that feed a sum are rounded before the add (mulRn): nvcc would
// otherwise contract them into fused multiply-adds, whose different rounding
// could flip near-ties in the expert ranking against the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_ROUTING_LOGIC_H
#define MOERT_SRC_CUDA_ROUTING_LOGIC_H

#include "backends/cuda/hd.h"
#include "kernels/logic/routing.h"

#include <math.h>
#include <stdint.h>

namespace moert::cuda {

/// The most experts a token chooses on the GPU (registers per thread).
inline constexpr int kRouterMaxTopK = 32;
/// The most expert groups of grouped selection on the GPU.
inline constexpr int kRouterMaxGroups = 64;
/// Assignments per dispatch chunk (the counting sort's unit of work).
inline constexpr int kDispatchChunk = 64;
/// Combine's "no row" mark in the inverse of `source` (above every row, so
/// that atomicMin keeps the smallest row).
inline constexpr long long kNoRow = 0x7fffffffffffffffLL;

/// Data errors the kernels record (DeviceErrorRecord::code).
enum RoutingError : int {
  /// Dispatch: a = position, b = the expert index.
  kDispatchIndexOutOfRange = 1,
  /// Combine: a = row, b = the assignment.
  kCombineSourceOutOfRange = 2,
  /// Combine: row a names the assignment that the smaller row b names.
  kCombineSourceRepeats = 3,
};

/// a * b rounded to float, never fused with a following add.
MOERT_HD inline float mulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

MOERT_HD inline float routingExp(float x) { return expf(x); }

using logic::normalizeKept;
using logic::offerCandidate;
using logic::ranksAbove;
/// The router's attributes (RouterAttrs), resolved for one step.
using RouterLogicParams = logic::RouterParams;

/// The per-token constants of the softmax: its maximum and 1 / sum.
struct SoftmaxStats {
  float max;
  float inverseSum;
};

/// Pass 1 and 2 over the token's logits `l` [E]: the maximum (NaN skipped,
/// as std::max does) and the sum of exponentials in double.
MOERT_HD inline SoftmaxStats softmaxStats(const float *l, int64_t experts) {
  float max = -INFINITY;
  for (int64_t e = 0; e < experts; ++e)
    if (max < l[e])
      max = l[e];
  double sum = 0;
  for (int64_t e = 0; e < experts; ++e)
    sum += routingExp(l[e] - max);
  return {max, static_cast<float>(1.0 / sum)};
}

/// The score of expert `e` (step 1 of the router).
MOERT_HD inline float routerScore(const RouterLogicParams &p, const float *l,
                                  const SoftmaxStats &stats, int64_t e) {
  if (p.afterTopK)
    return l[e];
  if (p.sigmoid)
    return 1.0f / (1.0f + routingExp(-l[e]));
  return mulRn(routingExp(l[e] - stats.max), stats.inverseSum);
}

/// The selection score of expert `e`: the score plus its bias (step 2).
MOERT_HD inline float selectionScore(const RouterLogicParams &p, const float *l,
                                     const float *bias,
                                     const SoftmaxStats &stats, int64_t e) {
  float s = routerScore(p, l, stats, e);
  return bias ? s + bias[e] : s;
}

/// A GPU thread's scores of one token (logic::routeScores' policy): each
/// recomputed from its logit.
struct RecomputedScores {
  const RouterLogicParams &p;
  const float *l, *bias;
  SoftmaxStats stats;
  MOERT_HD float score(int64_t e) const { return routerScore(p, l, stats, e); }
  MOERT_HD float selection(int64_t e) const {
    return selectionScore(p, l, bias, stats, e);
  }
  MOERT_HD static float exp(float x) { return routingExp(x); }
};

/// Routes token `t` of `logits` [T, E] (bias [E] or null) into
/// weights[t * k, +k) and indices[t * k, +k). Needs topK <= kRouterMaxTopK
/// and groups <= kRouterMaxGroups (checked on the host).
MOERT_HD inline void routeToken(const RouterLogicParams &p, const float *logits,
                                const float *bias, int64_t t, float *weights,
                                int64_t *indices) {
  const float *l = logits + t * p.experts;
  SoftmaxStats stats{0.0f, 1.0f};
  if (!p.afterTopK && !p.sigmoid)
    stats = softmaxStats(l, p.experts);
  float groupScores[kRouterMaxGroups], chosen[kRouterMaxTopK];
  int64_t keptGroups[kRouterMaxGroups];
  uint64_t keptMask[logic::keptMaskWords(kRouterMaxGroups)];
  logic::routeScores(p, RecomputedScores{p, l, bias, stats},
                     {groupScores, keptGroups, keptMask, chosen},
                     weights + t * p.topK, indices + t * p.topK);
}

/// The counter of one expert's kept assignments (logic::dropOverCapacity's
/// `load` for a thread that counts one expert).
struct OneExpertLoad {
  int64_t expert;
  int64_t *count;
  MOERT_HD int64_t *operator()(int64_t e) const {
    return e == expert ? count : nullptr;
  }
};

/// Capacity for expert `e` of sequence `b` of `indices` [sequences, length,
/// k]: its assignments in (choice, token) order beyond the first `capacity`
/// become -1.
MOERT_HD inline void applyCapacity(int64_t *indices, int64_t length, int64_t k,
                                   int64_t capacity, int64_t b, int64_t e) {
  int64_t load = 0;
  logic::dropOverCapacity(indices + b * length * k, length, k, capacity,
                          OneExpertLoad{e, &load});
}

/// The number of chunks of `rows` assignments.
MOERT_HD inline int64_t dispatchChunks(int64_t rows) {
  return (rows + kDispatchChunk - 1) / kDispatchChunk;
}

/// Whether dispatch's expert index `e` is valid (-1: dropped).
MOERT_HD inline bool validExpertIndex(int64_t e, int64_t experts) {
  return e >= -1 && e < experts;
}

/// Dispatch launch 1, thread (chunk c, expert e): how many assignments of
/// chunk c name expert e, into counts[c * E + e].
MOERT_HD inline void chunkHistogram(const int64_t *indices, int64_t rows,
                                    int64_t experts, int64_t c, int64_t e,
                                    int32_t *counts) {
  int64_t end =
      (c + 1) * kDispatchChunk < rows ? (c + 1) * kDispatchChunk : rows;
  int32_t count = 0;
  for (int64_t a = c * kDispatchChunk; a < end; ++a)
    count += indices[a] == e;
  counts[c * experts + e] = count;
}

/// Dispatch launch 1, thread (chunk c, expert 0) also: the first position
/// of chunk c whose expert index is out of range [-1, E), or -1.
MOERT_HD inline int64_t firstInvalidIndex(const int64_t *indices, int64_t rows,
                                          int64_t experts, int64_t c) {
  int64_t end =
      (c + 1) * kDispatchChunk < rows ? (c + 1) * kDispatchChunk : rows;
  for (int64_t a = c * kDispatchChunk; a < end; ++a)
    if (!validExpertIndex(indices[a], experts))
      return a;
  return -1;
}

/// Dispatch launch 2, thread (expert e): turns counts[., e] into the
/// exclusive prefix over the chunks (each chunk's base) and writes the total
/// into offsets[e + 1].
MOERT_HD inline void chunkPrefix(int32_t *counts, int64_t chunks,
                                 int64_t experts, int64_t e, int64_t *offsets) {
  int64_t total = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    int32_t count = counts[c * experts + e];
    counts[c * experts + e] = static_cast<int32_t>(total);
    total += count;
  }
  offsets[e + 1] = total;
}

/// Dispatch launch 3, one thread: offsets[0] = 0 and the inclusive scan of
/// the totals in offsets[1, E].
MOERT_HD inline void scanOffsets(int64_t *offsets, int64_t experts) {
  offsets[0] = 0;
  for (int64_t e = 0; e < experts; ++e)
    offsets[e + 1] += offsets[e];
}

/// Dispatch launch 4, thread (assignment a): its row in the sorted order
/// (written as source[row] = a), and, for a row a at or beyond offsets[E],
/// source[a] = -1. Rows of valid assignments are all below offsets[E], so
/// the two writes never meet.
MOERT_HD inline void placeAssignment(const int64_t *indices, int64_t rows,
                                     int64_t experts, const int32_t *bases,
                                     const int64_t *offsets, int64_t a,
                                     int64_t *source) {
  int64_t e = indices[a];
  if (e >= 0 && e < experts) {
    int64_t c = a / kDispatchChunk;
    int64_t before = 0;
    for (int64_t i = c * kDispatchChunk; i < a; ++i)
      before += indices[i] == e;
    source[offsets[e] + bases[c * experts + e] + before] = a;
  }
  if (a >= offsets[experts] && a < rows)
    source[a] = -1;
}

/// Dispatch launch 5, thread (row r, column h) of the expert inputs
/// [rows, H]: the token's element, or 0 in a padding row.
MOERT_HD inline float dispatchElement(const float *tokens,
                                      const int64_t *source, int64_t k,
                                      int64_t hidden, int64_t r, int64_t h) {
  int64_t a = source[r];
  return a >= 0 ? tokens[a / k * hidden + h] : 0.0f;
}

/// Combine launch 2, thread (row r): the error code for source[r] against
/// `assignments` (T * k), 0 when valid, -1 when the row is padding.
MOERT_HD inline int combineSourceStatus(const int64_t *source,
                                        int64_t assignments, int64_t r) {
  int64_t a = source[r];
  if (a == -1)
    return -1;
  return a < 0 || a >= assignments ? kCombineSourceOutOfRange : 0;
}

/// Keeps the smaller row in `slot` (atomicMin on the GPU; the emulated grid
/// runs threads one after another).
MOERT_HD inline void keepSmallerRow(long long *slot, long long r) {
#ifdef __CUDA_ARCH__
  atomicMin(slot, r);
#else
  if (r < *slot)
    *slot = r;
#endif
}

/// Combine launch 3, thread (row r) with a valid source[r]: whether a
/// smaller row names the same assignment (row[] holds the smallest).
MOERT_HD inline bool combineSourceRepeats(const int64_t *source,
                                          const long long *row, int64_t r) {
  return row[source[r]] != r;
}

/// Combine launch 4, thread (token t, column h): the weighted sum of the
/// token's k expert outputs (rows row[t * k + j], kNoRow when dropped) and,
/// for assignments with index -1, of its passthrough row.
MOERT_HD inline float combineElement(const float *outputs, const long long *row,
                                     const float *weights,
                                     const float *passthrough,
                                     const int64_t *indices, int64_t k,
                                     int64_t hidden, int64_t t, int64_t h) {
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    float wj = weights[t * k + j];
    long long r = row[t * k + j];
    if (r != kNoRow)
      sum += mulRn(wj, outputs[r * hidden + h]);
    if (indices && indices[t * k + j] == -1)
      sum += mulRn(wj, passthrough[t * hidden + h]);
  }
  return sum;
}

/// Strides of Gemm's C (rank <= 2, `dims` its shape) broadcast to [M, N]:
/// 0 along a dimension it lacks or has size 1.
inline void gemmCStrides(int rank, const int64_t *dims, int64_t &rowStride,
                         int64_t &colStride) {
  int64_t rows = rank == 2 ? dims[0] : 1;
  int64_t cols = rank >= 1 ? dims[rank - 1] : 1;
  rowStride = rows == 1 ? 0 : cols;
  colStride = cols == 1 ? 0 : 1;
}

/// The arguments of a column-major cuBLAS GEMM.
/// The call's first operand is the row-major B, its second the row-major A.
struct ColumnMajorGemm {
  bool transFirst, transSecond;
  int64_t m, n, k;
  int64_t ldFirst, ldSecond, ldc;
};

/// Row-major C[m, n] = op(A) op(B), each matrix with its row-major leading
/// dimension, as cuBLAS's column-major product C^T = op(B)^T op(A)^T: a
/// row-major matrix is its transpose in the column-major view, so B goes
/// first, with the same transposition flags and leading dimensions.
inline ColumnMajorGemm columnMajorGemm(bool transA, bool transB, int64_t m,
                                       int64_t n, int64_t k, int64_t lda,
                                       int64_t ldb, int64_t ldc) {
  return {transB, transA, n, m, k, ldb, lda, ldc};
}

/// Gemm's C broadcast to [M, N]: element (i, j) of C laid out with the
/// given element strides (0 along a broadcast dimension).
MOERT_HD inline float broadcastCElement(const float *c, int64_t rowStride,
                                        int64_t colStride, int64_t i,
                                        int64_t j) {
  return c[i * rowStride + j * colStride];
}

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_ROUTING_LOGIC_H
