//===- routing_logic.h - Per-thread logic of routing kernels ----*- C++ -*-===//
//
// What one GPU thread of the Router, Dispatch, Combine and Gemm helper
// kernels computes, as MOERT_HD functions (hd.h): routing_kernels.cu maps
// thread indices to these calls, and cuda_routing_logic_test.cpp runs the
// same functions over every thread index of each launch ("emulated grid")
// against the CPU backend's kernels (runtime/src/kernels/moe.cpp).
//
// The semantics are the CPU kernels', step by step; only the launch shape
// differs:
//
//  * Router: one thread per token. The softmax's maximum and sum are passes
//    over the token's logits, and each score is recomputed from its logit
//    when needed (deterministic, so every recomputation gives the same
//    value), so that no [E] array is needed. The chosen experts (at most
//    kRouterMaxTopK) and the kept groups (at most kRouterMaxGroups) live in
//    registers.
//  * Capacity: one thread per (sequence, expert), scanning its sequence in
//    the CPU's (choice, token) order; it only rewrites entries that name its
//    expert, so the threads never write the same entry. The renormalisation
//    over the kept choices (normalize_kept) then takes one thread per token.
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

/// The router's attributes (RouterAttrs), resolved for one step.
struct RouterLogicParams {
  int64_t experts;
  int64_t topK;
  bool sigmoid;
  bool afterTopK;
  bool normalize;
  float scale;
  int64_t groups;
  int64_t keptGroups;
};

/// Ranking of selection scores: larger first, NaN above every number.
MOERT_HD inline bool ranksAbove(float a, float b) {
  return a > b || (a != a && b == b);
}

/// Keeps the `k` best of the candidates offered in increasing id order,
/// sorted best first in values/ids[0, count); ties go to the earlier id.
MOERT_HD inline void offerCandidate(float value, int64_t id, int64_t k,
                                    int64_t &count, float *values,
                                    int64_t *ids) {
  if (count == k && !ranksAbove(value, values[k - 1]))
    return;
  int64_t pos = count < k ? count++ : k - 1;
  for (; pos > 0 && ranksAbove(value, values[pos - 1]); --pos) {
    values[pos] = values[pos - 1];
    ids[pos] = ids[pos - 1];
  }
  values[pos] = value;
  ids[pos] = id;
}

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

/// Routes token `t` of `logits` [T, E] (bias [E] or null) into
/// weights[t * k, +k) and indices[t * k, +k). Needs topK <= kRouterMaxTopK
/// and groups <= kRouterMaxGroups (checked on the host).
MOERT_HD inline void routeToken(const RouterLogicParams &p, const float *logits,
                                const float *bias, int64_t t, float *weights,
                                int64_t *indices) {
  const int64_t E = p.experts, k = p.topK;
  const float *l = logits + t * E;
  float *w = weights + t * k;
  int64_t *idx = indices + t * k;
  SoftmaxStats stats{0.0f, 1.0f};
  if (!p.afterTopK && !p.sigmoid)
    stats = softmaxStats(l, E);

  // 3. Grouped selection: a group scores by the sum of its two best
  //    experts; the best keptGroups groups stay eligible (a bit mask).
  bool grouped = p.groups > 1;
  uint64_t keptMask = 0;
  int64_t size = grouped ? E / p.groups : E;
  if (grouped) {
    float groupScores[kRouterMaxGroups];
    int64_t keptIds[kRouterMaxGroups];
    int64_t kept = 0;
    for (int64_t g = 0; g < p.groups; ++g) {
      float best[2];
      int64_t bestIds[2], count = 0;
      for (int64_t e = g * size; e < (g + 1) * size; ++e)
        offerCandidate(selectionScore(p, l, bias, stats, e), e, 2, count, best,
                       bestIds);
      offerCandidate(best[0] + best[1], g, p.keptGroups, kept, groupScores,
                     keptIds);
    }
    for (int64_t i = 0; i < kept; ++i)
      keptMask |= uint64_t(1) << keptIds[i];
  }

  // 4. The k best eligible experts, best first, ties to the lower index.
  float chosen[kRouterMaxTopK];
  int64_t count = 0;
  for (int64_t e = 0; e < E; ++e)
    if (!grouped || (keptMask >> (e / size) & 1))
      offerCandidate(selectionScore(p, l, bias, stats, e), e, k, count, chosen,
                     idx);

  // 5-7. Weights from the unbiased scores: softmax over the k, renormalised,
  //      scaled.
  for (int64_t j = 0; j < k; ++j)
    w[j] = routerScore(p, l, stats, idx[j]);
  if (p.afterTopK) {
    float max = -INFINITY;
    for (int64_t j = 0; j < k; ++j)
      if (max < w[j])
        max = w[j];
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      w[j] = routingExp(w[j] - max);
      sum += w[j];
    }
    for (int64_t j = 0; j < k; ++j)
      w[j] = static_cast<float>(w[j] / sum);
  }
  if (p.normalize) {
    double sum = 0;
    for (int64_t j = 0; j < k; ++j)
      sum += w[j];
    for (int64_t j = 0; j < k; ++j)
      w[j] = static_cast<float>(w[j] / (sum + 1e-20));
  }
  if (p.scale != 1.0f)
    for (int64_t j = 0; j < k; ++j)
      w[j] *= p.scale;
}

/// Capacity for expert `e` of sequence `b` of `indices` [sequences, length,
/// k]: its assignments in (choice, token) order beyond the first `capacity`
/// become -1.
MOERT_HD inline void applyCapacity(int64_t *indices, int64_t length, int64_t k,
                                   int64_t capacity, int64_t b, int64_t e) {
  int64_t *seq = indices + b * length * k;
  int64_t load = 0;
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < length; ++t) {
      int64_t &slot = seq[t * k + j];
      if (slot != e)
        continue;
      if (load >= capacity)
        slot = -1;
      else
        ++load;
    }
}

/// Renormalisation over the kept assignments (`normalize_kept`, GShard), for
/// one token after capacity: its weights `w` [k] become `w_j / max(sum,
/// epsilon)` where `idx` [k] kept choice j (>= 0), else 0, with `sum` the
/// f32 sum of the kept weights in choice order. A NaN sum stays NaN, as
/// DeepSpeed's clamp keeps it.
MOERT_HD inline void normalizeKept(float *w, const int64_t *idx, int64_t k,
                                   float epsilon) {
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j)
    if (idx[j] >= 0)
      sum += w[j];
  float denominator = sum < epsilon ? epsilon : sum;
  for (int64_t j = 0; j < k; ++j)
    w[j] = idx[j] >= 0 ? w[j] / denominator : 0.0f;
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
