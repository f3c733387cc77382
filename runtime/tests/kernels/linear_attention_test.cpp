//===- linear_attention_test.cpp - GatedDeltaRule against f64 ------------===//

#include "format/plan_writer.h"
#include "plan_bytes.h"
#include "test_util.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <limits>

namespace moert::testing {
namespace {

using fb::OpKind;

/// Sizes of one case.
struct Case {
  int64_t batch, tokens, queryHeads, keyHeads, valueHeads, keyDim, valueDim;
  float scale = 0.25f;
};

fb::AttrsUnion deltaAttrs(float scale) {
  fb::GatedDeltaRuleAttrsT table;
  table.scale = scale;
  return attrs(table);
}

/// The recurrence of docs/plan-format.md written out in double: per batch,
/// value head and token, decay, retrieve, correct, read.
void reference(const Case &c, const std::vector<float> &q,
               const std::vector<float> &k, const std::vector<float> &v,
               const std::vector<float> &state, const std::vector<float> &g,
               const std::vector<float> &beta, std::vector<float> &out,
               std::vector<float> &next) {
  const int64_t dk = c.keyDim, dv = c.valueDim, hv = c.valueHeads;
  out.assign(c.batch * c.tokens * hv * dv, 0.0f);
  next.assign(state.size(), 0.0f);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < hv; ++h) {
      std::vector<double> s(state.begin() + (b * hv + h) * dk * dv,
                            state.begin() + (b * hv + h + 1) * dk * dv);
      int64_t qh = h / (hv / c.queryHeads), kh = h / (hv / c.keyHeads);
      for (int64_t t = 0; t < c.tokens; ++t) {
        int64_t row = b * c.tokens + t;
        const float *qt = &q[(row * c.queryHeads + qh) * dk];
        const float *kt = &k[(row * c.keyHeads + kh) * dk];
        const float *vt = &v[(row * hv + h) * dv];
        double decay = std::exp(double(g[row * hv + h]));
        for (double &x : s)
          x *= decay;
        for (int64_t j = 0; j < dv; ++j) {
          double kv = 0;
          for (int64_t i = 0; i < dk; ++i)
            kv += s[i * dv + j] * kt[i];
          double delta = beta[row * hv + h] * (vt[j] - kv);
          for (int64_t i = 0; i < dk; ++i)
            s[i * dv + j] += kt[i] * delta;
          double o = 0;
          for (int64_t i = 0; i < dk; ++i)
            o += s[i * dv + j] * qt[i];
          out[(row * hv + h) * dv + j] = static_cast<float>(c.scale * o);
        }
      }
      for (int64_t i = 0; i < dk * dv; ++i)
        next[(b * hv + h) * dk * dv + i] = static_cast<float>(s[i]);
    }
}

void runCase(const Case &c, int threads, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "B " << c.batch << " S " << c.tokens << " Hq " << c.queryHeads
               << " Hk " << c.keyHeads << " Hv " << c.valueHeads << " threads "
               << threads);
  std::vector<int64_t> qShape = {c.batch, c.tokens, c.queryHeads, c.keyDim},
                       kShape = {c.batch, c.tokens, c.keyHeads, c.keyDim},
                       vShape = {c.batch, c.tokens, c.valueHeads, c.valueDim},
                       sShape = {c.batch, c.valueHeads, c.keyDim, c.valueDim},
                       gShape = {c.batch, c.tokens, c.valueHeads};
  auto count = [](const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  };
  std::vector<float> q = randomFloats(count(qShape), seed);
  std::vector<float> k = randomFloats(count(kShape), seed + 1);
  std::vector<float> v = randomFloats(count(vShape), seed + 2);
  std::vector<float> state = randomFloats(count(sShape), seed + 3);
  std::vector<float> g = randomFloats(count(gShape), seed + 4);
  std::vector<float> beta = randomFloats(count(gShape), seed + 5);
  // Decays of Qwen3.5's range (log factors <= 0), betas in (0, 1), keys of
  // norm ~1 (the export L2-normalizes them) so that the state stays bounded.
  for (float &x : g)
    x = -std::fabs(x);
  for (float &x : beta)
    x = 0.5f + 0.5f * x;
  for (float &x : k)
    x *= 1.0f / std::sqrt(static_cast<float>(c.keyDim));
  std::vector<float> out, next;
  reference(c, q, k, v, state, g, beta, out, next);
  absl::StatusOr<std::vector<Value>> result =
      runStep(OpKind::GatedDeltaRule,
              {f32(qShape, q), f32(kShape, k), f32(vShape, v),
               f32(sShape, state), f32(gShape, g), f32(gShape, beta)},
              {{DType::F32, dimsOf(vShape)}, {DType::F32, dimsOf(sShape)}},
              deltaAttrs(c.scale), threads);
  ASSERT_TRUE(result.ok()) << result.status();
  expectNear((*result)[0], vShape, out, 1e-4f);
  expectNear((*result)[1], sShape, next, 1e-4f);
}

TEST(GatedDeltaRule, MatchesReference) {
  // Qwen3.5's grouping: query/key heads shared by value heads.
  runCase({1, 5, 2, 2, 4, 16, 16, 0.25f}, 1, 10);
  runCase({1, 5, 2, 2, 4, 16, 16, 0.25f}, 3, 10);
  // Batch 2, rectangular state, different query and key head counts.
  runCase({2, 7, 1, 2, 4, 8, 12, 1.0f}, 2, 20);
  // One token (decode) and one head.
  runCase({3, 1, 1, 1, 1, 4, 4, 0.5f}, 2, 30);
  // A long prefix: 64 tokens of a sequential recurrence.
  runCase({1, 64, 2, 2, 4, 16, 8, 0.25f}, 4, 40);
}

TEST(GatedDeltaRule, NoTokensKeepsTheState) {
  std::vector<float> state = randomFloats(2 * 4 * 4, 3);
  absl::StatusOr<std::vector<Value>> result = runStep(
      OpKind::GatedDeltaRule,
      {f32({1, 0, 1, 4}, {}), f32({1, 0, 1, 4}, {}), f32({1, 0, 2, 4}, {}),
       f32({1, 2, 4, 4}, state), f32({1, 0, 2}, {}), f32({1, 0, 2}, {})},
      {{DType::F32, dimsOf({1, 0, 2, 4})}, {DType::F32, dimsOf({1, 2, 4, 4})}},
      deltaAttrs(1.0f));
  ASSERT_TRUE(result.ok()) << result.status();
  expectNear((*result)[1], {1, 2, 4, 4}, state);
}

TEST(GatedDeltaRule, RejectsInconsistentShapes) {
  auto zeros = [](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return f32(shape, std::vector<float>(n, 0.0f));
  };
  auto run = [&](std::vector<int64_t> q, std::vector<int64_t> state,
                 std::vector<int64_t> g) {
    return runStep(OpKind::GatedDeltaRule,
                   {zeros(q), zeros({1, 2, 2, 4}), zeros({1, 2, 4, 4}),
                    zeros(state), zeros(g), zeros({1, 2, 4})},
                   {{DType::F32, dimsOf({1, 2, 4, 4})},
                    {DType::F32, dimsOf(state)}},
                   deltaAttrs(1.0f))
        .status();
  };
  EXPECT_THAT(run({1, 2, 3, 4}, {1, 4, 4, 4}, {1, 2, 4}),
              StatusHas("query or key heads 3 do not divide the value "
                        "heads 4"));
  EXPECT_THAT(run({1, 2, 2, 4}, {1, 4, 8, 4}, {1, 2, 4}),
              StatusHas("(batch, value heads, key size, value size)"));
  EXPECT_THAT(run({1, 2, 2, 4}, {1, 4, 4, 4}, {1, 2, 2}),
              StatusHas("does not have one value per value head (4)"));
  EXPECT_THAT(run({1, 3, 2, 4}, {1, 4, 4, 4}, {1, 2, 4}),
              StatusHas("differ in batch or tokens"));
}

TEST(GatedDeltaRule, NeedsFormat19) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  std::vector<int32_t> ids;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1, 2, 1, 4},
                                     {1, 2, 1, 4},
                                     {1, 2, 1, 4},
                                     {1, 1, 4, 4},
                                     {1, 2, 1},
                                     {1, 2, 1}}) {
    ids.push_back(
        s.addTensor(absl::StrCat("in", ids.size()), DType::F32, dimsOf(shape)));
    s.addInput(ids.back());
  }
  int32_t out = s.addTensor("out", DType::F32, dimsOf({1, 2, 1, 4}));
  int32_t next = s.addTensor("next", DType::F32, dimsOf({1, 1, 4, 4}));
  s.addOutput(out);
  s.addOutput(next);
  s.addStep(OpKind::GatedDeltaRule, "delta", ids, {out, next},
            deltaAttrs(1.0f));
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorGenai);
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorTierPrefetch;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas("step 0 is a GatedDeltaRule step, which needs format "
                        "1.9, but the file is version 1.8"));
}

} // namespace
} // namespace moert::testing
