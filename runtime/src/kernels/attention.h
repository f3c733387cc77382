//===- attention.h - Scaled dot-product attention on the CPU ----*- C++ -*-===//
//
// The Attention step (docs/plan-format.md): out = softmax(cap(scale * Q K^T)
// + mask) V per batch and query head, query head h reading key/value head
// h / (heads / kvHeads), with an optional soft cap and a sink logit per
// head. The operands are addressed by explicit strides so
// that keys and values can be read in place from a larger buffer (a KV cache
// of max_seq positions of which `keys` are valid). Defined in attention.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_ATTENTION_H
#define MOERT_SRC_KERNELS_ATTENTION_H

#include "exec/thread_pool.h"

#include <cstdint>

namespace moert::detail {

/// One attention computation. Strides are in elements; the last dimension
/// of query, key, value and output is contiguous. A key/value batch stride
/// of 0 shares one batch of keys; mask strides of 0 broadcast that
/// dimension.
struct AttentionArgs {
  int64_t batch = 0, heads = 0, queries = 0, headDim = 0;
  int64_t kvHeads = 0, keys = 0, valueDim = 0;
  float scale = 1.0f;
  /// > 0: each scaled score s becomes softcap * tanh(s / softcap) before the
  /// mask is added; 0: no cap.
  float softcap = 0.0f;
  /// [batch, heads, queries, headDim]: strides of batch, head, query.
  const float *query = nullptr;
  int64_t queryStrides[3] = {};
  /// [batch, kvHeads, keys, headDim] and [batch, kvHeads, keys, valueDim].
  const float *key = nullptr;
  int64_t keyStrides[3] = {};
  const float *value = nullptr;
  int64_t valueStrides[3] = {};
  /// Optional additive mask over [batch, heads, queries, keys].
  const float *mask = nullptr;
  int64_t maskStrides[4] = {};
  /// Optional [heads]: one extra logit per query head in each row's softmax
  /// that has no value (attention sinks).
  const float *sinks = nullptr;
  /// [batch, heads, queries, valueDim].
  float *output = nullptr;
  int64_t outputStrides[3] = {};
};

/// Computes `args` on the pool's threads (over heads and blocks of
/// queries). Scores and probabilities are f32, the softmax subtracts each
/// row's maximum (the sink's, when larger) and sums in double, as the
/// Softmax step does; the reciprocal of the sum multiplies each output row
/// (after the product with the values) rather than the probabilities.
void computeAttention(ThreadPool &pool, const AttentionArgs &args);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_ATTENTION_H
