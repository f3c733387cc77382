//===- attention_test.cpp - The Attention step against an f64 reference ---===//

#include "format/plan_writer.h"
#include "kernels/attention.h"
#include "plan_bytes.h"
#include "test_util.h"

#include "absl/strings/str_cat.h"

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
  std::vector<int64_t> maskShape = {};
  float scale = 0.25f;
  /// 0: no cap.
  float softcap = 0.0f;
  /// One logit per query head, or empty: no sinks.
  std::vector<float> sinks = {};
  /// What the causal mask writes above the diagonal.
  float maskedValue = std::numeric_limits<float>::lowest();
};

/// softmax(cap(scale * Q K^T) + mask, sink) V in double, contiguous
/// operands, head h reading kv head h / (heads / kvHeads): the formula of
/// docs/plan-format.md written out, the sink one more logit of the sum.
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
        double sink = c.sinks.empty() ? -std::numeric_limits<double>::infinity()
                                      : c.sinks[h];
        double max = sink;
        for (int64_t j = 0; j < c.keys; ++j) {
          const float *kj = &k[((kb * c.kvHeads + g) * c.keys + j) * c.headDim];
          double dot = 0;
          for (int64_t d = 0; d < c.headDim; ++d)
            dot += double(qi[d]) * kj[d];
          s[j] = c.scale * dot;
          if (c.softcap > 0)
            s[j] = c.softcap * std::tanh(s[j] / c.softcap);
          if (c.masked) {
            const std::vector<int64_t> &m = c.maskShape;
            int64_t idx[4] = {b, h, i, j}, offset = 0;
            for (int d = 0; d < 4; ++d)
              offset = offset * m[d] + (m[d] == 1 ? 0 : idx[d]);
            s[j] += mask[offset];
          }
          max = std::max(max, s[j]);
        }
        double sum = c.sinks.empty() ? 0.0 : std::exp(sink - max);
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

/// A causal mask of 0 and `masked` (the exporters write the lowest float,
/// onnxruntime-genai's importer -inf) over the last two of `shape`'s dims,
/// positions offset by `past`, plus noise.
std::vector<float>
causalMask(const std::vector<int64_t> &shape, int64_t past, uint32_t seed,
           float masked = std::numeric_limits<float>::lowest()) {
  std::vector<float> noise = randomFloats(numelOf(shape), seed);
  std::vector<float> mask(noise.size());
  int64_t q = shape[2], k = shape[3];
  for (size_t e = 0; e < mask.size(); ++e) {
    int64_t j = k == 1 ? 0 : e % k;
    int64_t i = q == 1 ? past : (e / k) % q + past;
    mask[e] = j > i ? masked : noise[e];
  }
  return mask;
}

fb::AttrsUnion attentionAttrs(float scale, float softcap = 0.0f) {
  fb::AttentionAttrsT table;
  table.scale = scale;
  table.softcap = softcap;
  return attrs(table);
}

/// Runs `c` as a one-step plan against the reference; `mask` replaces the
/// causal one when given.
void runCase(const Case &c, int threads,
             std::optional<std::vector<float>> givenMask = std::nullopt) {
  SCOPED_TRACE(::testing::Message()
               << "B " << c.batch << " H " << c.heads << " Sq " << c.queries
               << " Hkv " << c.kvHeads << " Skv " << c.keys << " softcap "
               << c.softcap << " sinks " << c.sinks.size());
  std::vector<int64_t> qShape{c.batch, c.heads, c.queries, c.headDim};
  std::vector<int64_t> kShape{c.kvBatch, c.kvHeads, c.keys, c.headDim};
  std::vector<int64_t> vShape{c.kvBatch, c.kvHeads, c.keys, c.valueDim};
  std::vector<float> q = randomFloats(numelOf(qShape), 11);
  std::vector<float> k = randomFloats(numelOf(kShape), 12);
  std::vector<float> v = randomFloats(numelOf(vShape), 13);
  std::vector<float> mask;
  std::optional<Value> maskValue;
  if (c.masked) {
    mask = givenMask
               ? *givenMask
               : causalMask(c.maskShape, c.keys - c.queries, 14, c.maskedValue);
    maskValue = f32(c.maskShape, mask);
  }
  std::vector<std::optional<Value>> inputs{f32(qShape, q), f32(kShape, k),
                                           f32(vShape, v), maskValue};
  if (!c.sinks.empty())
    inputs.push_back(f32({c.heads}, c.sinks));
  std::vector<int64_t> outShape{c.batch, c.heads, c.queries, c.valueDim};
  Value out = run1(OpKind::Attention, inputs, {DType::F32, dimsOf(outShape)},
                   attentionAttrs(c.scale, c.softcap), threads);
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

TEST(Attention, EncoderRowsOfManyKeys) {
  // A vision encoder's form: every patch attends to every patch (no mask),
  // rows of 300 keys (not a multiple of any vector width, so the softmax's
  // vector loops and their tails both run), queries over ten blocks.
  runCase({1, 2, 300, 16, 1, 2, 300, 16, false, {}}, 1);
  runCase({1, 2, 300, 16, 1, 2, 300, 16, false, {}}, 2);
  // Segmented: two images of 180 and 120 patches, each attending within
  // itself (-inf across), as a cu_seqlens mask gives them.
  Case c{1, 2, 300, 16, 1, 2, 300, 16, true, {1, 1, 300, 300}};
  std::vector<float> segments(300 * 300);
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 300; ++j)
      segments[i * 300 + j] = (i < 180) == (j < 180)
                                  ? 0.0f
                                  : -std::numeric_limits<float>::infinity();
  runCase(c, 2, segments);
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

TEST(Attention, MinusInfinityMask) {
  // onnxruntime-genai's causal masks: -inf entries get exactly 0, and the
  // rows (each with at least its own position) no NaN.
  Case c{1, 4, 9, 16, 1, 2, 12, 8, true, {1, 1, 9, 12}};
  c.maskedValue = -std::numeric_limits<float>::infinity();
  runCase(c, 2);
}

TEST(Attention, Sinks) {
  // One sink per query head, over grouped heads and several query blocks,
  // one sink far above the scores (nearly all mass on it) and one far below.
  Case c{2, 4, 40, 8, 2, 2, 40, 8, true, {2, 1, 40, 40}};
  c.sinks = {0.5f, -1.25f, 30.0f, -30.0f};
  runCase(c, 3);
  c.masked = false;
  c.maskShape = {};
  runCase(c, 2);
  // Keys of batch 1, decode against a prefix.
  Case decode{3, 4, 1, 16, 1, 1, 70, 4};
  decode.sinks = {0.0f, 1.0f, 2.0f, 3.0f};
  runCase(decode, 2);
}

TEST(Attention, Softcap) {
  // Scores scaled up so that the cap bites (|scale * q.k| well above 2).
  Case c{1, 4, 9, 32, 1, 2, 20, 8, true, {1, 1, 9, 20}, 2.0f, 2.5f};
  runCase(c, 2);
  c.maskedValue = -std::numeric_limits<float>::infinity();
  runCase(c, 2);
  // With sinks, and with a cap that hardly changes the scores.
  c.sinks = {1.0f, 0.0f, -1.0f, 2.0f};
  runCase(c, 2);
  c.softcap = 1e4f;
  runCase(c, 2);
}

TEST(Attention, FullyMaskedRowWithSinkGivesZeros) {
  // Rows 0 and 3 masked entirely with -inf (a padded query): with a finite
  // sink all their mass is on it and the output is 0; the other rows are
  // causal. Without sinks such a row is NaN, as the decomposed Softmax
  // (and onnxruntime's) gives it.
  Case c{1, 2, 5, 8, 1, 2, 5, 8, true, {1, 2, 5, 5}, 0.5f};
  c.sinks = {0.25f, -3.0f};
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> mask = causalMask(c.maskShape, 0, 31, -inf);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i : {0, 3})
      for (int64_t j = 0; j < 5; ++j)
        mask[(h * 5 + i) * 5 + j] = -inf;
  runCase(c, 2, mask);
  c.softcap = 3.0f;
  runCase(c, 2, mask);

  // The masked rows are exactly zero.
  std::vector<float> q = randomFloats(2 * 5 * 8, 11);
  std::vector<float> k = randomFloats(2 * 5 * 8, 12);
  Value out =
      run1(OpKind::Attention,
           {f32({1, 2, 5, 8}, q), f32({1, 2, 5, 8}, k), f32({1, 2, 5, 8}, k),
            f32(c.maskShape, mask), f32({2}, c.sinks)},
           {DType::F32, dimsOf({1, 2, 5, 8})}, attentionAttrs(0.5f));
  std::vector<float> values = out.as<float>();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i : {0, 3})
      for (int64_t d = 0; d < 8; ++d)
        EXPECT_EQ(values[(h * 5 + i) * 8 + d], 0.0f) << h << " " << i;

  c.sinks.clear();
  runCase(c, 2, mask);
  // A sink of -inf is no sink: NaN again, never a silent 0.
  c.sinks = {-inf, -inf};
  runCase(c, 2, mask);
}

TEST(Attention, MaskAbsentSinksPresent) {
  // Input 3 omitted (-1) and input 4 given.
  std::vector<float> q = randomFloats(4 * 3 * 8, 41);
  std::vector<float> k = randomFloats(2 * 6 * 8, 42);
  Case c{1, 4, 3, 8, 1, 2, 6, 8, false, {}, 0.3f};
  c.sinks = {-0.5f, 0.5f, 1.5f, 0.0f};
  runCase(c, 2);
  Value out = run1(OpKind::Attention,
                   {f32({1, 4, 3, 8}, q), f32({1, 2, 6, 8}, k),
                    f32({1, 2, 6, 8}, k), std::nullopt, f32({4}, c.sinks)},
                   {DType::F32, dimsOf({1, 4, 3, 8})}, attentionAttrs(0.3f));
  expectNear(out, {1, 4, 3, 8}, reference(c, q, k, k, {}));
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
  result = runStep(OpKind::Attention,
                   {q2, k, k, std::nullopt, f32({3}, {0.0f, 0.0f, 0.0f})},
                   {{DType::F32, dimsOf({1, 2, 2, 4})}}, attentionAttrs(1.0f));
  EXPECT_THAT(result.status(),
              StatusHas("sinks [3] do not have one logit per query head (2)"));
  result = runStep(OpKind::Attention,
                   {q2, k, k, std::nullopt, f32({1, 2}, {0.0f, 0.0f})},
                   {{DType::F32, dimsOf({1, 2, 2, 4})}}, attentionAttrs(1.0f));
  EXPECT_THAT(result.status(), StatusHas("has rank 2; expected 1"));
  for (float softcap : {-1.0f, std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
    result = runStep(OpKind::Attention, {q2, k, k},
                     {{DType::F32, dimsOf({1, 2, 2, 4})}},
                     attentionAttrs(1.0f, softcap));
    EXPECT_THAT(result.status(),
                StatusHas("is not a finite non-negative number (0: none)"));
  }
}

/// A one-step Attention plan with `inputs` input slots, those past the value
/// omitted (-1) except the last when `sinks`, and `softcap`.
std::vector<uint8_t> attentionPlan(int inputs, bool sinks, float softcap) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  std::vector<int32_t> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(
        s.addTensor(absl::StrCat("in", i), DType::F32, dimsOf({1, 2, 3, 4})));
    s.addInput(ids.back());
  }
  while (static_cast<int>(ids.size()) < inputs)
    ids.push_back(-1);
  if (sinks) {
    ids.back() = s.addTensor("sinks", DType::F32, dimsOf({2}));
    s.addInput(ids.back());
  }
  int32_t out = s.addTensor("out", DType::F32, dimsOf({1, 2, 3, 4}));
  s.addOutput(out);
  s.addStep(OpKind::Attention, "attention", ids, {out},
            attentionAttrs(1.0f, softcap));
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

TEST(Attention, SinksAndSoftcapNeedFormat19) {
  // Plain attention stays 1.6, so that 1.6 runtimes keep reading it; sinks
  // or a softcap make the plan 1.9, and a file that declares itself older
  // with either is refused (a 1.8 runtime would ignore the softcap).
  struct Form {
    int inputs;
    bool sinks;
    float softcap;
    uint16_t minor;
    const char *feature;
  } forms[] = {
      {3, false, 0.0f, detail::kFormatVersionMinorAttention, nullptr},
      {5, true, 0.0f, detail::kFormatVersionMinorGenai, "a sinks input"},
      {5, false, 0.0f, detail::kFormatVersionMinorGenai, "a sinks input"},
      {3, false, 30.0f, detail::kFormatVersionMinorGenai, "a softcap"},
  };
  for (const Form &form : forms) {
    SCOPED_TRACE(::testing::Message()
                 << form.inputs << " inputs, softcap " << form.softcap);
    std::vector<uint8_t> bytes =
        attentionPlan(form.inputs, form.sinks, form.softcap);
    auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ((*plan)->versionMinor(), form.minor);
    if (!form.feature)
      continue;
    std::vector<uint8_t> older =
        rewrite(bytes, [](detail::FileHeader &header, auto &) {
          header.versionMinor = detail::kFormatVersionMinorTierPrefetch;
        });
    EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
                StatusHas(absl::StrCat("step 0 is an Attention step with ",
                                       form.feature,
                                       ", which needs format 1.9, but the "
                                       "file is version 1.8")));
  }
}

/// q, k, v [1, H, S, 8] and a mask -> Identity (GPU) -> Attention with sinks
/// and a softcap -> Identity (GPU): the Attention step between GPU steps.
absl::StatusOr<std::vector<uint8_t>> sinkPlan(Backend backend) {
  PlanWriter writer({backend, 1, backend == Backend::Cuda ? 90u : 0u});
  int t = writer.addSymbol("S", 1, 16);
  ScheduleBuilder &s = writer.schedule();
  auto shape = [&](int64_t heads) {
    return std::vector<PlanDim>{1, heads, PlanDim::symbol(t), 8};
  };
  int32_t q = s.addTensor("q", DType::F32, shape(4));
  int32_t k = s.addTensor("k", DType::F32, shape(2));
  int32_t v = s.addTensor("v", DType::F32, shape(2));
  int32_t mask = s.addTensor("mask", DType::F32,
                             {1, 1, PlanDim::symbol(t), PlanDim::symbol(t)});
  for (int32_t id : {q, k, v, mask})
    s.addInput(id);
  static const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  int32_t sinkId =
      s.addWeight("sinks", DType::F32, {4}, sinks.data(), sinks.size() * 4);
  int32_t q2 = s.addTensor("q2", DType::F32, shape(4));
  s.addStep(OpKind::Identity, "qcopy", {q}, {q2});
  int32_t att = s.addTensor("att", DType::F32, shape(4));
  s.addStep(OpKind::Attention, "attention", {q2, k, v, mask, sinkId}, {att},
            attentionAttrs(0.5f, 4.0f));
  int32_t out = s.addTensor("out", DType::F32, shape(4));
  s.addStep(OpKind::Identity, "outcopy", {att}, {out});
  s.addOutput(out);
  return writer.serialize();
}

template <typename SessionT>
absl::StatusOr<Value> runSinkPlan(SessionT &session, int64_t S, uint32_t seed) {
  std::vector<int64_t> maskShape{1, 1, S, S};
  std::vector<float> mask =
      causalMask(maskShape, 0, seed, -std::numeric_limits<float>::infinity());
  // Row 0 fully masked: all its mass goes to the sinks.
  std::fill_n(mask.begin(), S, -std::numeric_limits<float>::infinity());
  std::vector<float> q = randomFloats(4 * S * 8, seed + 1);
  std::vector<float> k = randomFloats(2 * S * 8, seed + 2);
  std::vector<float> v = randomFloats(2 * S * 8, seed + 3);
  for (auto [name, heads, data] :
       {std::tuple("q", int64_t{4}, &q), std::tuple("k", int64_t{2}, &k),
        std::tuple("v", int64_t{2}, &v)})
    MOERT_RETURN_IF_ERROR(session.setInput(name, DType::F32, {1, heads, S, 8},
                                           data->data(), data->size() * 4));
  MOERT_RETURN_IF_ERROR(session.setInput("mask", DType::F32, maskShape,
                                         mask.data(), mask.size() * 4));
  MOERT_RETURN_IF_ERROR(session.run());
  return outputValue(session, "out");
}

TEST(Attention, SinkPlanLoadsAndTheCpuRunsIt) {
  // What the GPU test needs of the plan, checked everywhere.
  auto gpuBytes = sinkPlan(Backend::Cuda);
  ASSERT_TRUE(gpuBytes.ok()) << gpuBytes.status();
  EXPECT_TRUE(Plan::loadFromMemory(gpuBytes->data(), gpuBytes->size()).ok());
  auto bytes = sinkPlan(Backend::Cpu);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto cpu = Session::create(**plan, SessionOptions());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto out = runSinkPlan(**cpu, 7, 57);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<float> values = out->as<float>();
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t d = 0; d < 8; ++d)
      EXPECT_EQ(values[h * 7 * 8 + d], 0.0f);
}

TEST(Attention, CudaSessionRunsSinksAndSoftcapOnTheHost) {
  // The CUDA backend has no Attention kernel: the step, sinks and softcap
  // included, runs on the host between GPU steps and gives the CPU
  // session's result.
  MOERT_REQUIRE_GPU();
  auto cpuBytes = sinkPlan(Backend::Cpu);
  auto gpuBytes = sinkPlan(Backend::Cuda);
  ASSERT_TRUE(cpuBytes.ok()) << cpuBytes.status();
  ASSERT_TRUE(gpuBytes.ok()) << gpuBytes.status();
  auto pair = openOnBothBackends(*cpuBytes, *gpuBytes);
  ASSERT_TRUE(pair.ok()) << pair.status();
  for (int64_t S : {int64_t{1}, int64_t{7}, int64_t{16}}) {
    SCOPED_TRACE(::testing::Message() << "S " << S);
    auto want = runSinkPlan(*pair->cpu, S, 50 + S);
    auto got = runSinkPlan(*pair->gpu, S, 50 + S);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->shape, want->shape);
    expectSameFloats(got->as<float>(), want->as<float>());
    // The fully masked row is zeros, no NaN anywhere.
    std::vector<float> values = got->as<float>();
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < 8; ++d)
        EXPECT_EQ(values[h * S * 8 + d], 0.0f);
    for (float x : values)
      EXPECT_FALSE(std::isnan(x));
  }
  for (const StepStats &step : pair->gpu->stepStats()) {
    if (step.name == "attention") {
      EXPECT_THAT(step.op, ::testing::EndsWith("@host"));
    }
  }
}

} // namespace
} // namespace moert::testing
