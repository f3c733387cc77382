//===- causal_conv_test.cpp - CausalConv against f64, and segments --------===//

#include "exec/thread_pool.h"
#include "format/plan_writer.h"
#include "kernels/recurrent_state.h"
#include "plan_bytes.h"
#include "test_util.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <cstring>

namespace moert::testing {
namespace {

using fb::OpKind;

fb::AttrsUnion convAttrs(bool silu) {
  fb::CausalConvAttrsT table;
  table.silu = silu;
  return attrs(table);
}

/// docs/plan-format.md's CausalConv written out in double.
void reference(int64_t batch, int64_t channels, int64_t length, int64_t kernel,
               bool silu, const std::vector<float> &x,
               const std::vector<float> &w, const std::vector<float> &bias,
               const std::vector<float> &state, std::vector<float> &out,
               std::vector<float> &next) {
  int64_t history = kernel - 1;
  out.assign(batch * channels * length, 0.0f);
  next.assign(state.size(), 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      std::vector<double> all;
      for (int64_t j = 0; j < history; ++j)
        all.push_back(state[(b * channels + c) * history + j]);
      for (int64_t t = 0; t < length; ++t)
        all.push_back(x[(b * channels + c) * length + t]);
      for (int64_t t = 0; t < length; ++t) {
        double y = bias.empty() ? 0.0 : bias[c];
        for (int64_t k = 0; k < kernel; ++k)
          y += w[c * kernel + k] * all[t + k];
        if (silu)
          y = y / (1.0 + std::exp(-y));
        out[(b * channels + c) * length + t] = static_cast<float>(y);
      }
      for (int64_t j = 0; j < history; ++j)
        next[(b * channels + c) * history + j] =
            static_cast<float>(all[all.size() - history + j]);
    }
}

void runCase(int64_t batch, int64_t channels, int64_t length, int64_t kernel,
             bool silu, bool withBias, int threads, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "B " << batch << " C " << channels << " L " << length << " K "
               << kernel << " silu " << silu << " bias " << withBias
               << " threads " << threads);
  std::vector<int64_t> xShape = {batch, channels, length},
                       sShape = {batch, channels, kernel - 1};
  std::vector<float> x = randomFloats(batch * channels * length, seed);
  std::vector<float> w = randomFloats(channels * kernel, seed + 1);
  std::vector<float> state =
      randomFloats(batch * channels * (kernel - 1), seed + 2);
  std::vector<float> bias =
      withBias ? randomFloats(channels, seed + 3) : std::vector<float>();
  std::vector<float> out, next;
  reference(batch, channels, length, kernel, silu, x, w, bias, state, out,
            next);
  std::vector<std::optional<Value>> inputs = {
      f32(xShape, x), f32({channels, kernel}, w), f32(sShape, state)};
  if (withBias)
    inputs.push_back(f32({channels}, bias));
  absl::StatusOr<std::vector<Value>> result =
      runStep(OpKind::CausalConv, inputs,
              {{DType::F32, dimsOf(xShape)}, {DType::F32, dimsOf(sShape)}},
              convAttrs(silu), threads);
  ASSERT_TRUE(result.ok()) << result.status();
  expectNear((*result)[0], xShape, out, 1e-5f);
  expectNear((*result)[1], sShape, next, 0.0f);
}

TEST(CausalConv, MatchesReference) {
  // LFM2's shape: kernel 3, silu off, no bias; a prompt and a decode row.
  runCase(1, 16, 9, 3, false, false, 1, 10);
  runCase(1, 16, 1, 3, false, false, 2, 11);
  // Qwen3.5's: kernel 4, silu, batch 2, more threads than channels.
  runCase(2, 3, 7, 4, true, true, 4, 20);
  // A kernel of 1 has no state; a prompt shorter than the history.
  runCase(1, 8, 5, 1, true, true, 2, 30);
  runCase(1, 8, 2, 5, false, true, 2, 40);
}

TEST(CausalConv, RejectsInconsistentShapes) {
  auto zeros = [](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return f32(shape, std::vector<float>(n, 0.0f));
  };
  absl::Status status =
      runStep(
          OpKind::CausalConv,
          {zeros({1, 4, 3}), zeros({4, 3}), zeros({1, 4, 3})},
          {{DType::F32, dimsOf({1, 4, 3})}, {DType::F32, dimsOf({1, 4, 3})}},
          convAttrs(false))
          .status();
  EXPECT_THAT(status, StatusHas("are not [B, C, L], [C, K] and [B, C, K - 1]"));
}

TEST(CausalConv, NeedsFormat20) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  std::vector<int32_t> ids;
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{1, 2, 3}, {2, 3}, {1, 2, 2}}) {
    ids.push_back(
        s.addTensor(absl::StrCat("in", ids.size()), DType::F32, dimsOf(shape)));
    s.addInput(ids.back());
  }
  int32_t out = s.addTensor("out", DType::F32, dimsOf({1, 2, 3}));
  int32_t next = s.addTensor("next", DType::F32, dimsOf({1, 2, 2}));
  s.addOutput(out);
  s.addOutput(next);
  s.addStep(OpKind::CausalConv, "conv", ids, {out, next}, convAttrs(true));
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorStatePrefill);
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorWideningGather;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas("step 0 is a CausalConv step, which needs format "
                        "1.23, but the file is version 1.19"));
}

/// Segments of one step run each sequence as it runs alone: the rows of
/// three sequences (a decode row, a prompt chunk, a decode row), each from
/// its own state, give the bits of each sequence's step by itself, and
/// leave each state where its own step does.
TEST(RecurrentState, SegmentsRunEachSequenceAsAlone) {
  detail::ThreadPool pool(3);
  const int64_t channels = 6, kernel = 4, history = kernel - 1;
  const int64_t lengths[] = {1, 5, 1}, rows = 7;
  std::vector<float> x = randomFloats(channels * rows, 1);
  std::vector<float> w = randomFloats(channels * kernel, 2);
  std::vector<float> bias = randomFloats(channels, 3);
  std::vector<float> states = randomFloats(3 * channels * history, 4);
  std::vector<float> batched(channels * rows), batchedStates = states;
  detail::CausalConvArgs args;
  args.channels = channels;
  args.length = rows;
  args.kernel = kernel;
  args.silu = true;
  args.input = x.data();
  args.weight = w.data();
  args.bias = bias.data();
  args.output = batched.data();
  std::vector<detail::StateSegment> segments;
  for (int64_t s = 0, begin = 0; s < 3; begin += lengths[s++])
    segments.push_back({begin, begin + lengths[s],
                        batchedStates.data() + s * channels * history});
  detail::computeCausalConv(pool, args, segments);
  for (int64_t s = 0, begin = 0; s < 3; begin += lengths[s++]) {
    // Sequence s alone: its rows as a [1, C, L] step of their own.
    int64_t n = lengths[s];
    std::vector<float> alone(channels * n), own(channels * n);
    for (int64_t c = 0; c < channels; ++c)
      std::memcpy(&own[c * n], &x[c * rows + begin], n * sizeof(float));
    std::vector<float> state(states.begin() + s * channels * history,
                             states.begin() + (s + 1) * channels * history);
    detail::CausalConvArgs one = args;
    one.length = n;
    one.input = own.data();
    one.output = alone.data();
    detail::computeCausalConv(pool, one, {{0, n, state.data()}});
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t t = 0; t < n; ++t)
        ASSERT_EQ(alone[c * n + t], batched[c * rows + begin + t])
            << "sequence " << s << " channel " << c << " row " << t;
    for (int64_t i = 0; i < channels * history; ++i)
      ASSERT_EQ(state[i], batchedStates[s * channels * history + i])
          << "sequence " << s << " state " << i;
  }

  // The gated delta rule: value heads 4 sharing 2 query/key heads.
  const int64_t hq = 2, hv = 4, dk = 4, dv = 3;
  std::vector<float> q = randomFloats(rows * hq * dk, 5);
  std::vector<float> k = randomFloats(rows * hq * dk, 6);
  std::vector<float> v = randomFloats(rows * hv * dv, 7);
  std::vector<float> g = randomFloats(rows * hv, 8);
  std::vector<float> beta = randomFloats(rows * hv, 9);
  for (float &f : g)
    f = -std::fabs(f);
  std::vector<float> deltaStates = randomFloats(3 * hv * dk * dv, 10);
  std::vector<float> deltaOut(rows * hv * dv), deltaBatched = deltaStates;
  detail::GatedDeltaArgs delta;
  delta.tokens = rows;
  delta.queryHeads = delta.keyHeads = hq;
  delta.valueHeads = hv;
  delta.keyDim = dk;
  delta.valueDim = dv;
  delta.scale = 0.5f;
  delta.query = q.data();
  delta.key = k.data();
  delta.value = v.data();
  delta.decay = g.data();
  delta.beta = beta.data();
  delta.output = deltaOut.data();
  segments.clear();
  for (int64_t s = 0, begin = 0; s < 3; begin += lengths[s++])
    segments.push_back(
        {begin, begin + lengths[s], deltaBatched.data() + s * hv * dk * dv});
  detail::computeGatedDeltaRule(pool, delta, segments);
  for (int64_t s = 0, begin = 0; s < 3; begin += lengths[s++]) {
    int64_t n = lengths[s];
    std::vector<float> alone(n * hv * dv);
    std::vector<float> state(deltaStates.begin() + s * hv * dk * dv,
                             deltaStates.begin() + (s + 1) * hv * dk * dv);
    detail::GatedDeltaArgs one = delta;
    one.tokens = n;
    one.query += begin * hq * dk;
    one.key += begin * hq * dk;
    one.value += begin * hv * dv;
    one.decay += begin * hv;
    one.beta += begin * hv;
    one.output = alone.data();
    detail::computeGatedDeltaRule(pool, one, {{0, n, state.data()}});
    for (int64_t i = 0; i < n * hv * dv; ++i)
      ASSERT_EQ(alone[i], deltaOut[begin * hv * dv + i])
          << "sequence " << s << " element " << i;
    for (int64_t i = 0; i < hv * dk * dv; ++i)
      ASSERT_EQ(state[i], deltaBatched[s * hv * dk * dv + i])
          << "sequence " << s << " state " << i;
  }
}

} // namespace
} // namespace moert::testing
