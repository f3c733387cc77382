//===- kv_pool_test.cpp - The KV pool's attention against a plain one -----===//

#include "generate/kv_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace moert::detail {
namespace {

/// softmax(cap(scale q.k) [, sink]) . v over keys 0..n-1, in double.
std::vector<float> plainAttention(const std::vector<const float *> &keys,
                                  const std::vector<const float *> &values,
                                  const float *q, int64_t dim, int64_t valueDim,
                                  float scale, float softcap,
                                  const float *sink) {
  size_t n = keys.size();
  std::vector<double> s(n);
  double max = sink ? *sink : -INFINITY;
  for (size_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < dim; ++d)
      dot += static_cast<double>(q[d]) * keys[j][d];
    dot *= scale;
    if (softcap > 0)
      dot = softcap * std::tanh(dot / softcap);
    s[j] = dot;
    max = std::max(max, dot);
  }
  double sum = sink ? std::exp(*sink - max) : 0;
  for (double &x : s)
    sum += (x = std::exp(x - max));
  std::vector<float> out(valueDim, 0.0f);
  for (int64_t d = 0; d < valueDim; ++d) {
    double acc = 0;
    for (size_t j = 0; j < n; ++j)
      acc += s[j] / sum * values[j][d];
    out[d] = static_cast<float>(acc);
  }
  return out;
}

struct Case {
  int64_t slots, heads, kvHeads, dim, valueDim, maxSeq;
  float softcap;
  bool sinks;
  /// > 0: each row sees its last `window` positions only.
  int64_t window = 0;
};

/// Runs rows of several slots (some a prompt chunk of one slot, some one
/// decode row after a prefix written earlier) and compares every output
/// with the plain attention over each row's slot prefix.
void checkCase(const Case &c) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  KvPool keys(c.slots, c.kvHeads, c.maxSeq, c.dim);
  KvPool values(c.slots, c.kvHeads, c.maxSeq, c.valueDim);
  // The rows: slot 0 decodes at position 5, slot 1 a prompt chunk at 0..3,
  // the last slot decodes at position maxSeq - 1.
  std::vector<PoolRow> rows = {{0, 5}, {1, 0}, {1, 1},
                               {1, 2}, {1, 3}, {c.slots - 1, c.maxSeq - 1}};
  // The prefixes a previous step left in the pool.
  for (int64_t s = 0; s < c.slots; ++s)
    for (int64_t h = 0; h < c.kvHeads; ++h)
      for (int64_t p = 0; p < c.maxSeq; ++p) {
        float *k = keys.slot(s) + (h * c.maxSeq + p) * c.dim;
        float *v = values.slot(s) + (h * c.maxSeq + p) * c.valueDim;
        for (int64_t d = 0; d < c.dim; ++d)
          k[d] = uniform(rng);
        for (int64_t d = 0; d < c.valueDim; ++d)
          v[d] = uniform(rng);
      }
  int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> q(c.heads * n * c.dim), k(c.kvHeads * n * c.dim),
      v(c.kvHeads * n * c.valueDim), sinks(c.heads),
      out(c.heads * n * c.valueDim, NAN);
  for (std::vector<float> *x : {&q, &k, &v, &sinks})
    for (float &f : *x)
      f = uniform(rng);
  PoolAttentionArgs args;
  args.rows = n;
  args.heads = c.heads;
  args.kvHeads = c.kvHeads;
  args.headDim = c.dim;
  args.valueDim = c.valueDim;
  args.scale = 0.3f;
  args.softcap = c.softcap;
  args.sinks = c.sinks ? sinks.data() : nullptr;
  args.window = c.window;
  args.query = q.data();
  args.key = k.data();
  args.value = v.data();
  args.rowSlots = rows.data();
  args.keys = &keys;
  args.values = &values;
  args.output = out.data();
  ThreadPool pool(3);
  computePoolAttention(pool, args);
  int64_t group = c.heads / c.kvHeads;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < c.heads; ++h) {
      int64_t g = h / group;
      const PoolRow &row = rows[r];
      // The row's key and value were written at its position.
      for (int64_t d = 0; d < c.dim; ++d)
        ASSERT_EQ(
            keys.slot(row.slot)[(g * c.maxSeq + row.position) * c.dim + d],
            k[(g * n + r) * c.dim + d]);
      std::vector<const float *> ks, vs;
      int64_t first =
          c.window > 0 ? std::max<int64_t>(0, row.position + 1 - c.window) : 0;
      for (int64_t p = first; p <= row.position; ++p) {
        ks.push_back(keys.slot(row.slot) + (g * c.maxSeq + p) * c.dim);
        vs.push_back(values.slot(row.slot) + (g * c.maxSeq + p) * c.valueDim);
      }
      std::vector<float> expected =
          plainAttention(ks, vs, &q[(h * n + r) * c.dim], c.dim, c.valueDim,
                         0.3f, c.softcap, c.sinks ? &sinks[h] : nullptr);
      for (int64_t d = 0; d < c.valueDim; ++d)
        EXPECT_NEAR(out[(h * n + r) * c.valueDim + d], expected[d], 1e-5)
            << "row " << r << " head " << h << " dim " << d;
    }
}

TEST(KvPool, AttentionMatchesAPlainOneOverEachSlotsPrefix) {
  checkCase({/*slots=*/3, /*heads=*/4, /*kvHeads=*/2, /*dim=*/16,
             /*valueDim=*/16, /*maxSeq=*/12, /*softcap=*/0, /*sinks=*/false});
}

TEST(KvPool, AttentionWithSoftcapSinksAndOtherValueSize) {
  checkCase({/*slots=*/2, /*heads=*/3, /*kvHeads=*/1, /*dim=*/8,
             /*valueDim=*/5, /*maxSeq=*/9, /*softcap=*/2.5f, /*sinks=*/true});
}

TEST(KvPool, SlidingWindowSeesTheLastPositionsOnly) {
  // Window 3: rows at positions 5 and 11 see 3 keys, a prompt chunk's rows
  // at 0 .. 3 see 1, 2, 3 and 3.
  checkCase({/*slots=*/3, /*heads=*/4, /*kvHeads=*/2, /*dim=*/16,
             /*valueDim=*/16, /*maxSeq=*/12, /*softcap=*/0, /*sinks=*/true,
             /*window=*/3});
}

TEST(KvPool, StartsZeroedAndKeepsSlotsApart) {
  KvPool pool(2, 1, 4, 2);
  EXPECT_EQ(pool.bytes(), 2u * 4 * 2 * sizeof(float));
  for (int64_t i = 0; i < pool.slotElements(); ++i)
    EXPECT_EQ(pool.slot(1)[i], 0.0f);
  EXPECT_EQ(pool.slot(1) - pool.slot(0), pool.slotElements());
}

} // namespace
} // namespace moert::detail
