//===- kv_pool.cpp - KV caches of many sequences, and their attention -----===//

#include "generate/kv_pool.h"

#include "kernels/common.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace moert::detail {

KvPool::KvPool(int64_t slots, int64_t heads, int64_t maxSeq, int64_t dim)
    : slots_(slots), heads_(heads), maxSeq_(maxSeq), dim_(dim),
      data_(static_cast<size_t>(slots * heads * maxSeq * dim), 0.0f) {}

namespace {

/// Copies row `r` of `src` ([heads, rows, dim]) to `position` of `slot`.
void writeRow(KvPool &pool, int64_t slot, int64_t position, const float *src,
              int64_t rows, int64_t r) {
  int64_t dim = pool.dim();
  float *base = pool.slot(slot) + position * dim;
  for (int64_t h = 0; h < pool.heads(); ++h)
    std::memcpy(base + h * pool.maxSeq() * dim, src + (h * rows + r) * dim,
                static_cast<size_t>(dim) * sizeof(float));
}

} // namespace

void computePoolAttention(ThreadPool &pool, const PoolAttentionArgs &a) {
  if (a.rows == 0 || a.heads == 0)
    return;
  for (int64_t r = 0; r < a.rows; ++r) {
    writeRow(*a.keys, a.rowSlots[r].slot, a.rowSlots[r].position, a.key, a.rows,
             r);
    writeRow(*a.values, a.rowSlots[r].slot, a.rowSlots[r].position, a.value,
             a.rows, r);
  }
  int64_t group = a.heads / a.kvHeads;
  int64_t maxSeq = a.keys->maxSeq();
  int64_t longest = 0;
  for (int64_t r = 0; r < a.rows; ++r)
    longest = std::max(longest, a.rowSlots[r].position + 1);
  // One task per (row, key/value head): the `group` query heads that read
  // that head against the slot's prefix, by the two products and the
  // softmax of the Attention step's kernel (the heads of a group lie
  // rows * headDim apart in the query). Tasks are grouped to about
  // kTaskWork multiply-adds.
  constexpr int64_t kTaskWork = 1 << 16;
  int64_t work =
      std::max<int64_t>(1, group * longest * (a.headDim + a.valueDim));
  pool.parallelFor(
      a.rows * a.kvHeads, std::max<int64_t>(1, kTaskWork / work),
      [&](int64_t begin, int64_t end) {
        std::vector<float> scores(static_cast<size_t>(group * maxSeq));
        for (int64_t t = begin; t < end; ++t) {
          int64_t r = t / a.kvHeads, g = t % a.kvHeads, h0 = g * group;
          const PoolRow &row = a.rowSlots[r];
          int64_t first =
              a.window > 0 ? std::max<int64_t>(0, row.position + 1 - a.window)
                           : 0;
          int64_t keys = row.position + 1 - first;
          const float *q = a.query + (h0 * a.rows + r) * a.headDim;
          const float *k =
              a.keys->slot(row.slot) + (g * maxSeq + first) * a.keys->dim();
          const float *v =
              a.values->slot(row.slot) + (g * maxSeq + first) * a.values->dim();
          float *out = a.output + (h0 * a.rows + r) * a.valueDim;
          float *s = scores.data();
          sgemm(false, true, group, keys, a.headDim, a.scale, q,
                a.rows * a.headDim, k, a.keys->dim(), 0.0f, s, keys);
          for (int64_t i = 0; i < group; ++i) {
            float *row = s + i * keys;
            if (a.softcap > 0.0f)
              for (int64_t j = 0; j < keys; ++j)
                row[j] = a.softcap * std::tanh(row[j] / a.softcap);
            softmaxRow(row, row, keys, a.sinks ? a.sinks + h0 + i : nullptr);
          }
          sgemm(false, false, group, a.valueDim, keys, 1.0f, s, keys, v,
                a.values->dim(), 0.0f, out, a.rows * a.valueDim);
        }
      });
}

} // namespace moert::detail
