//===- attention_test.cpp - The Attention step against an f64 reference ---===//

#include "kernels/attention.h"
#include "test_util.h"

#include <cmath>
#include <limits>

namespace moert::testing {
namespace {

using detail::AttentionArgs;
using detail::computeAttention;
using fb::OpKind;

/// Sizes of one test case; mask dims of 1 broadcast.
struct Case {
  int64_t batch, heads, queries, headDim, kvBatch, kvHeads, keys, valueDim;
  bool masked = false;
  std::vector<int64_t> maskShape;
  float scale = 0.25f;
};

/// softmax(scale * Q K^T + mask) V in double, contiguous operands, head h
/// reading kv head h / (heads / kvHeads).
std::vector<float> reference(const Case &c, const std::vector<float> &q,
                             const std::vector<float> &k,
                             const std::vector<float> &v,
                             const std::vector<float> &mask) {
  std::vector<float> out(c.batch * c.heads * c.queries * c.valueDim);
  int64_t group = c.heads / c.kvHeads;
  std::vector<double> s(c.keys);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.queries; ++i) {
        int64_t kb = c.kvBatch == 1 ? 0 : b, g = h / group;
        const float *qi = &q[((b * c.heads + h) * c.queries + i) * c.headDim];
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < c.keys; ++j) {
          const float *kj = &k[((kb * c.kvHeads + g) * c.keys + j) * c.headDim];
          double dot = 0;
          for (int64_t d = 0; d < c.headDim; ++d)
            dot += double(qi[d]) * kj[d];
          s[j] = c.scale * dot;
          if (c.masked) {
            const std::vector<int64_t> &m = c.maskShape;
            int64_t idx[4] = {b, h, i, j}, offset = 0;
            for (int d = 0; d < 4; ++d)
              offset = offset * m[d] + (m[d] == 1 ? 0 : idx[d]);
            s[j] += mask[offset];
          }
          max = std::max(max, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < c.keys; ++j)
          sum += (s[j] = std::exp(s[j] - max));
        for (int64_t d = 0; d < c.valueDim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < c.keys; ++j)
            acc += s[j] / sum *
                   v[((kb * c.kvHeads + g) * c.keys + j) * c.valueDim + d];
          out[((b * c.heads + h) * c.queries + i) * c.valueDim + d] =
              static_cast<float>(acc);
        }
      }
  return out;
}

/// A causal mask of 0 and the lowest float (as the exporters write it) over
/// the last two of `shape`'s dims, positions offset by `past`, plus noise.
std::vector<float> causalMask(const std::vector<int64_t> &shape, int64_t past,
                              uint32_t seed) {
  std::vector<float> noise = randomFloats(numelOf(shape), seed);
  std::vector<float> mask(noise.size());
  int64_t q = shape[2], k = shape[3];
  for (size_t e = 0; e < mask.size(); ++e) {
    int64_t j = k == 1 ? 0 : e % k;
    int64_t i = q == 1 ? past : (e / k) % q + past;
    mask[e] = j > i ? std::numeric_limits<float>::lowest() : noise[e];
  }
  return mask;
}

fb::AttrsUnion attentionAttrs(float scale) {
  fb::AttentionAttrsT table;
  table.scale = scale;
  return attrs(table);
}

void runCase(const Case &c, int threads) {
  SCOPED_TRACE(::testing::Message()
               << "B " << c.batch << " H " << c.heads << " Sq " << c.queries
               << " Hkv " << c.kvHeads << " Skv " << c.keys);
  std::vector<int64_t> qShape{c.batch, c.heads, c.queries, c.headDim};
  std::vector<int64_t> kShape{c.kvBatch, c.kvHeads, c.keys, c.headDim};
  std::vector<int64_t> vShape{c.kvBatch, c.kvHeads, c.keys, c.valueDim};
  std::vector<float> q = randomFloats(numelOf(qShape), 11);
  std::vector<float> k = randomFloats(numelOf(kShape), 12);
  std::vector<float> v = randomFloats(numelOf(vShape), 13);
  std::vector<float> mask;
  std::optional<Value> maskValue;
  if (c.masked) {
    mask = causalMask(c.maskShape, c.keys - c.queries, 14);
    maskValue = f32(c.maskShape, mask);
  }
  std::vector<int64_t> outShape{c.batch, c.heads, c.queries, c.valueDim};
  Value out =
      run1(OpKind::Attention,
           {f32(qShape, q), f32(kShape, k), f32(vShape, v), maskValue},
           {DType::F32, dimsOf(outShape)}, attentionAttrs(c.scale), threads);
  expectNear(out, outShape, reference(c, q, k, v, mask));
}

TEST(Attention, MultiHeadWithCausalMask) {
  runCase({1, 4, 7, 16, 1, 4, 7, 16, true, {1, 1, 7, 7}}, 2);
}

TEST(Attention, GroupedQueryHeads) {
  // 8 query heads over 2 key/value heads, queries over several blocks.
  runCase({2, 8, 70, 8, 2, 2, 70, 8, true, {2, 1, 70, 70}}, 3);
}

TEST(Attention, FewerQueriesThanKeysAndNoMask) {
  // Decode against a prefix: one query and 9 new rows against 300 keys.
  runCase({1, 4, 1, 32, 1, 1, 300, 32, false, {}}, 2);
  runCase({1, 4, 9, 32, 1, 2, 300, 16, true, {1, 4, 9, 300}}, 2);
}

TEST(Attention, SharedKeyBatchAndBroadcastMask) {
  // Keys of batch 1 for a batch of 3; a mask that varies over heads and
  // keys only.
  runCase({3, 2, 5, 8, 1, 2, 6, 4, true, {1, 2, 1, 6}}, 2);
}

TEST(Attention, StridedCacheBuffer) {
  // Keys and values read in place from a [1, kvh, maxSeq, d] cache of
  // which `keys` positions are valid (the rest is garbage that must not be
  // read), against the contiguous reference.
  Case c{1, 6, 3, 8, 1, 3, 21, 8, true, {1, 1, 3, 21}};
  const int64_t maxSeq = 64;
  std::vector<float> q = randomFloats(c.heads * c.queries * c.headDim, 21);
  std::vector<float> k = randomFloats(c.kvHeads * c.keys * c.headDim, 22);
  std::vector<float> v = randomFloats(c.kvHeads * c.keys * c.valueDim, 23);
  std::vector<float> mask = causalMask(c.maskShape, c.keys - c.queries, 24);
  std::vector<float> kCache(c.kvHeads * maxSeq * c.headDim,
                            std::numeric_limits<float>::quiet_NaN());
  std::vector<float> vCache(kCache);
  for (int64_t g = 0; g < c.kvHeads; ++g)
    for (int64_t j = 0; j < c.keys; ++j)
      for (int64_t d = 0; d < c.headDim; ++d) {
        kCache[(g * maxSeq + j) * c.headDim + d] =
            k[(g * c.keys + j) * c.headDim + d];
        vCache[(g * maxSeq + j) * c.headDim + d] =
            v[(g * c.keys + j) * c.headDim + d];
      }
  std::vector<float> out(c.heads * c.queries * c.valueDim);
  AttentionArgs args;
  args.batch = 1;
  args.heads = c.heads;
  args.queries = c.queries;
  args.headDim = c.headDim;
  args.kvHeads = c.kvHeads;
  args.keys = c.keys;
  args.valueDim = c.valueDim;
  args.scale = c.scale;
  args.query = q.data();
  args.queryStrides[0] = c.heads * c.queries * c.headDim;
  args.queryStrides[1] = c.queries * c.headDim;
  args.queryStrides[2] = c.headDim;
  for (auto [strides, data, cache] :
       {std::tuple(args.keyStrides, &args.key, &kCache),
        std::tuple(args.valueStrides, &args.value, &vCache)}) {
    strides[0] = 0;
    strides[1] = maxSeq * c.headDim;
    strides[2] = c.headDim;
    *data = cache->data();
  }
  args.mask = mask.data();
  args.maskStrides[2] = c.keys;
  args.maskStrides[3] = 1;
  args.output = out.data();
  args.outputStrides[0] = c.heads * c.queries * c.valueDim;
  args.outputStrides[1] = c.queries * c.valueDim;
  args.outputStrides[2] = c.valueDim;
  detail::ThreadPool pool(2);
  computeAttention(pool, args);
  std::vector<float> expected = reference(c, q, k, v, mask);
  for (size_t e = 0; e < out.size(); ++e)
    EXPECT_NEAR(out[e], expected[e],
                1e-5f * std::max(1.0f, std::abs(expected[e])))
        << "element " << e;
}

TEST(Attention, NoKeysGiveZeros) {
  // As MatMul(Softmax(scores [.., 3, 0]), V [.., 0, 4]) does.
  std::vector<float> q = randomFloats(2 * 3 * 4, 5);
  Value out =
      run1(OpKind::Attention,
           {f32({1, 2, 3, 4}, q), f32({1, 2, 0, 4}, {}), f32({1, 2, 0, 4}, {})},
           {DType::F32, dimsOf({1, 2, 3, 4})}, attentionAttrs(1.0f));
  expectNear(out, {1, 2, 3, 4}, std::vector<float>(24, 0.0f));
}

TEST(Attention, RejectsInconsistentShapes) {
  std::vector<float> x = randomFloats(64, 1);
  auto q = f32({1, 3, 2, 4}, std::vector<float>(x.begin(), x.begin() + 24));
  auto k = f32({1, 2, 2, 4}, std::vector<float>(x.begin(), x.begin() + 16));
  absl::StatusOr<std::vector<Value>> result =
      runStep(OpKind::Attention, {q, k, k},
              {{DType::F32, dimsOf({1, 3, 2, 4})}}, attentionAttrs(1.0f));
  EXPECT_THAT(result.status(), StatusHas("do not divide the query heads 3"));
  auto q2 = f32({1, 2, 2, 4}, std::vector<float>(x.begin(), x.begin() + 16));
  auto mask = f32({1, 1, 3, 2}, std::vector<float>(6, 0.0f));
  result = runStep(OpKind::Attention, {q2, k, k, mask},
                   {{DType::F32, dimsOf({1, 2, 2, 4})}}, attentionAttrs(1.0f));
  EXPECT_THAT(result.status(), StatusHas("does not broadcast to the scores"));
}

} // namespace
} // namespace moert::testing
