//===- batch_state_test.cpp - Continuous batching with state pairs --------===//
//
// A tiny hybrid generation plan: the logits after tokens t_0..t_k are a
// causal convolution (kernel 3, no bias) over the embeddings E[t_i], at the
// last token, @ W. Its state pair holds the last two embeddings; the
// prefill schedule (format 1.23) runs the prompt from a zero state, as the
// compiler's first prompt does. Sequences sharing steps must each draw
// what they draw alone, from their own state.
//
//===----------------------------------------------------------------------===//

#include "moert/batch_generator.h"
#include "moert/generator.h"

#include "format/plan_file.h"
#include "format/plan_writer.h"
#include "generation_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <map>

namespace moert::test {
namespace {

using fb::OpKind;
using ::testing::HasSubstr;

constexpr int64_t kKernel = 3;
/// [kDim, kKernel].
const std::vector<float> kConv = {0.5f, -1.0f, 1.0f, 0.25f, 0.75f, -0.5f};

/// What the plan computes: the logits after `tokens`.
std::vector<float> convLogits(const std::vector<int64_t> &tokens) {
  int64_t last = static_cast<int64_t>(tokens.size()) - 1;
  double y[kDim] = {0, 0};
  for (int64_t c = 0; c < kDim; ++c)
    for (int64_t k = 0; k < kKernel; ++k) {
      int64_t i = last - (kKernel - 1) + k;
      if (i >= 0)
        y[c] += kConv[c * kKernel + k] * kEmbed[tokens[i] * kDim + c];
    }
  std::vector<float> logits(kVocab);
  for (int64_t v = 0; v < kVocab; ++v)
    logits[v] = static_cast<float>(y[0] * kProj[v] + y[1] * kProj[kVocab + v]);
  return logits;
}

/// Adds the model over `n` tokens from state `state`; returns the logits.
int32_t addConvModel(ScheduleBuilder &s, PlanDim n, int32_t ids, int32_t state,
                     int32_t embed, int32_t conv, int32_t proj,
                     const std::string &next, bool readNext) {
  int32_t rows = s.addTensor("rows", DType::F32, {1, n, kDim});
  s.addStep(OpKind::Gather, "embed", {embed, ids}, {rows},
            attrs(fb::AxisAttrsT()));
  fb::TransposeAttrsT swap;
  swap.perm = {0, 2, 1};
  int32_t channels = s.addTensor("channels", DType::F32, {1, kDim, n});
  s.addStep(OpKind::Transpose, "to_channels", {rows}, {channels}, attrs(swap));
  int32_t out = s.addTensor("conv", DType::F32, {1, kDim, n});
  int32_t after =
      s.addTensor(next, DType::F32, {1, kDim, PlanDim(kKernel - 1)});
  s.addStep(OpKind::CausalConv, "conv", {channels, conv, state}, {out, after},
            attrs(fb::CausalConvAttrsT()));
  if (readNext) {
    int32_t twice =
        s.addTensor("twice", DType::F32, {1, kDim, PlanDim(kKernel - 1)});
    s.addStep(OpKind::Add, "twice", {after, after}, {twice});
    s.addOutput(twice);
  }
  int32_t back = s.addTensor("back", DType::F32, {1, n, kDim});
  s.addStep(OpKind::Transpose, "to_rows", {out}, {back}, attrs(swap));
  int32_t logits = s.addTensor("logits", DType::F32, {1, n, kVocab});
  s.addStep(OpKind::MatMul, "proj", {back, proj}, {logits});
  s.addOutput(logits);
  s.addOutput(after);
  return logits;
}

std::unique_ptr<Plan> loadConvPlan(bool readStart = false) {
  PlanWriter writer({Backend::Cpu, 1}, "batch_state_test");
  int tokens = writer.addSymbol("n", 1, kMaxSeq - 1);
  int prompt = writer.addSymbol("prefill.n", 1, kMaxSeq - 1);
  ScheduleBuilder &d = writer.schedule(0);
  DecodeInputs inputs = addTokenInputs(d, PlanDim::symbol(tokens));
  int32_t past =
      d.addTensor("past.conv", DType::F32, {1, kDim, PlanDim(kKernel - 1)});
  d.addInput(past);
  int32_t embed =
      d.addWeight("embed", DType::F32, {kVocab, kDim}, kEmbed.data(), 40);
  int32_t conv =
      d.addWeight("conv_w", DType::F32, {kDim, kKernel}, kConv.data(), 24);
  int32_t proj =
      d.addWeight("proj", DType::F32, {kDim, kVocab}, kProj.data(), 40);
  addConvModel(d, PlanDim::symbol(tokens), inputs.ids, past, embed, conv, proj,
               "present.conv", false);
  ScheduleBuilder &p = writer.prefillSchedule(0);
  int32_t pIds = addTokenInputs(p, PlanDim::symbol(prompt)).ids;
  const std::vector<float> zeros(kDim * (kKernel - 1), 0.0f);
  int32_t start = p.addWeight("zero_state", DType::F32, {1, kDim, kKernel - 1},
                              zeros.data(), zeros.size() * 4);
  addConvModel(p, PlanDim::symbol(prompt), pIds, start,
               p.addSharedWeight("embed", 0, embed),
               p.addSharedWeight("conv_w", 0, conv),
               p.addSharedWeight("proj", 0, proj), "start.conv", readStart);
  fb::GenerationT &gen = writer.generation();
  gen.max_seq = kMaxSeq;
  gen.input_ids = "input_ids";
  gen.position_ids = "position_ids";
  gen.logits = "logits";
  auto pair = std::make_unique<fb::CachePairT>();
  pair->input = "past.conv";
  pair->output = "present.conv";
  pair->prefill_output = "start.conv";
  pair->state = true;
  gen.cache.push_back(std::move(pair));
  gen.batchable = true;
  auto bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (!bytes.ok())
    return nullptr;
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : nullptr;
}

TEST(BatchGeneratorStates, EverySequenceRunsFromItsOwnState) {
  std::unique_ptr<Plan> plan = loadConvPlan();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->versionMinor(), detail::kFormatVersionMinorStatePrefill);
  BatchOptions options;
  options.slots = 3;
  options.keepLogits = true;
  auto batch = BatchGenerator::create(*plan, {/*threads=*/2}, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  BatchGenerator &b = **batch;
  ASSERT_EQ(b.batchBlocker(), "");
  // One state of 2 channels × 2 inputs per slot.
  EXPECT_EQ(b.poolBytes(), uint64_t{3 * kDim * (kKernel - 1) * 4});
  // More sequences than slots: later ones take freed slots, which must
  // start again from zeros.
  std::vector<std::vector<int64_t>> prompts = {
      {1, 2}, {4}, {0, 3, 3, 1}, {2, 2, 1}, {3}};
  std::vector<int64_t> counts = {5, 6, 3, 4, 3};
  std::map<int64_t, std::vector<int64_t>> seen;
  std::map<int64_t, int64_t> left;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions generate;
    generate.maxNewTokens = counts[i];
    auto id = b.add(prompts[i], generate);
    ASSERT_TRUE(id.ok()) << id.status();
    seen[*id] = prompts[i];
    left[*id] = counts[i];
  }
  int steps = 0;
  while (b.hasWork()) {
    auto events = b.step();
    ASSERT_TRUE(events.ok()) << events.status();
    ++steps;
    for (const SequenceEvent &e : *events) {
      ASSERT_GE(e.token, 0);
      std::vector<float> want = convLogits(seen[e.sequence]);
      EXPECT_EQ(e.token, argmax(want)) << "sequence " << e.sequence;
      if (e.finish == FinishReason::None) {
        std::vector<float> got = b.lastLogits(e.sequence);
        ASSERT_EQ(got.size(), want.size());
        for (size_t v = 0; v < got.size(); ++v)
          EXPECT_NEAR(got[v], want[v], 1e-6) << "sequence " << e.sequence;
      }
      seen[e.sequence].push_back(e.token);
      --left[e.sequence];
    }
  }
  for (const auto &[id, count] : left)
    EXPECT_EQ(count, 0) << "sequence " << id;
  EXPECT_LT(steps, 5 + 6 + 3 + 4 + 3);
}

TEST(BatchGeneratorStates, TheGeneratorRunsThePromptFromZeros) {
  std::unique_ptr<Plan> plan = loadConvPlan();
  ASSERT_TRUE(plan);
  auto gen = Generator::create(*plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  for (int round = 0; round < 2; ++round) {
    std::vector<int64_t> tokens = {3, 0, 4, 2};
    ASSERT_TRUE((*gen)->prefill(tokens).ok());
    for (int i = 0; i < 3; ++i) {
      std::vector<float> want = convLogits(tokens);
      const std::vector<float> &got = (*gen)->logits();
      for (size_t v = 0; v < want.size(); ++v)
        EXPECT_NEAR(got[v], want[v], 1e-6) << "round " << round;
      tokens.push_back(argmax(want));
      ASSERT_TRUE((*gen)->decode(tokens.back()).ok());
    }
  }
}

TEST(BatchGeneratorStates, RefusesAStateReadInTheStep) {
  std::unique_ptr<Plan> plan = loadConvPlan(/*readStart=*/true);
  ASSERT_TRUE(plan);
  auto batch = BatchGenerator::create(*plan, {/*threads=*/1}, BatchOptions());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT((*batch)->batchBlocker(),
              HasSubstr("state 'start.conv' is read by"));
  EXPECT_EQ((*batch)->slots(), 1);
}

} // namespace
} // namespace moert::test
