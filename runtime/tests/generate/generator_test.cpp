//===- generator_test.cpp - moert::Generator over a written plan ----------===//
//
// A tiny generation plan written with the plan writer: a "model" whose
// logits after tokens t_0..t_k are (E[t_0] + ... + E[t_k]) @ W, with the
// embeddings as its KV cache. The decode schedule concatenates the new
// token's embedding to the past cache (the exported-graph form) and sums
// the present; the prefill schedule writes the prompt's embeddings as the
// cache and takes a running sum. The tests run the real loader, sessions
// and Generator, and compare with the same arithmetic done here.
//
//===----------------------------------------------------------------------===//

#include "format/plan_writer.h"
#include "generation_model.h"
#include "moert/generator.h"
#include "observe/inspect.h"
#include "plan_bytes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>

namespace moert {
namespace {

using ::testing::HasSubstr;
using namespace ::moert::test;

struct PlanOptions {
  /// Name the cache pair's input after no graph input.
  bool badPairInput = false;
  /// Give the decode schedule an input the generator cannot feed.
  bool extraInput = false;
  /// No generation table at all.
  bool plain = false;
};

/// A plan without a prefill schedule: one decode schedule that takes n
/// tokens against a past that may be empty (the prompt runs with past 0).
std::vector<uint8_t> writeSingleSchedulePlan() {
  using fb::OpKind;
  PlanWriter writer({Backend::Cpu, 1}, "generator_test");
  int past = writer.addSymbol("past", 0, kMaxSeq - 1);
  int tokens = writer.addSymbol("n", 1, kMaxSeq - 1);
  ScheduleBuilder &d = writer.schedule(0);
  PlanDim n = PlanDim::symbol(tokens);
  auto [ids, pos, cache] = addDecodeInputs(d, n, past);
  int32_t embed =
      d.addWeight("embed", DType::F32, {kVocab, kDim}, kEmbed.data(), 40);
  int32_t proj =
      d.addWeight("proj", DType::F32, {kDim, kVocab}, kProj.data(), 40);
  const int64_t axis1[] = {1}, axis2[] = {2};
  int32_t unsqueezeAxes = d.addWeight("axes1", DType::I64, {1}, axis1, 8);
  int32_t sumAxes = d.addWeight("axes2", DType::I64, {1}, axis2, 8);
  int32_t rows = d.addTensor("rows", DType::F32, {1, n, kDim});
  int32_t rows4 = d.addTensor("rows4", DType::F32, {1, 1, n, kDim});
  int32_t present = d.addTensor("present.0", DType::F32,
                                {1, 1, PlanDim::dynamic(kMaxSeq), kDim});
  int32_t sum = d.addTensor("sum", DType::F32, {1, 1, kDim});
  // The last position's logits only: [1, 1, vocab].
  int32_t logits = d.addTensor("logits", DType::F32, {1, 1, kVocab});
  fb::AxisAttrsT axis0;
  d.addStep(OpKind::Gather, "embed", {embed, ids}, {rows}, attrs(axis0));
  d.addStep(OpKind::Unsqueeze, "rows4", {rows, unsqueezeAxes}, {rows4});
  fb::AxisAttrsT concatAxis;
  concatAxis.axis = 2;
  d.addStep(OpKind::Concat, "cat", {cache, rows4}, {present},
            attrs(concatAxis));
  fb::ReduceAttrsT reduce;
  reduce.keepdims = false;
  d.addStep(OpKind::ReduceSum, "sum", {present, sumAxes}, {sum}, attrs(reduce));
  d.addStep(OpKind::MatMul, "proj", {sum, proj}, {logits});
  d.addOutput(logits);
  d.addOutput(present);
  setGenerationTable(writer, "past.0", "present.0");
  auto bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

std::vector<uint8_t> writePlan(const PlanOptions &options = {}) {
  using fb::OpKind;
  PlanWriter writer({Backend::Cpu, 1}, "generator_test");
  int past = writer.addSymbol("past", 1, kMaxSeq - 1);
  int prompt = writer.addSymbol("prefill.n", 1, kMaxSeq - 1);
  ScheduleBuilder &d = writer.schedule(0);
  auto [ids, pos, cache] = addDecodeInputs(d, 1, past);
  if (options.extraInput)
    d.addInput(d.addTensor("attention_mask", DType::I64, {1, 1}));
  int32_t embed =
      d.addWeight("embed", DType::F32, {kVocab, kDim}, kEmbed.data(), 40);
  int32_t proj =
      d.addWeight("proj", DType::F32, {kDim, kVocab}, kProj.data(), 40);
  const int64_t shape4[] = {1, 1, 1, kDim};
  int32_t shape = d.addWeight("shape", DType::I64, {4}, shape4, 32);
  const int64_t axis2[] = {2};
  int32_t axes = d.addWeight("axes", DType::I64, {1}, axis2, 8);
  int32_t row = d.addTensor("row", DType::F32, {1, 1, kDim});
  int32_t row4 = d.addTensor("row4", DType::F32, {1, 1, 1, kDim});
  int32_t present = d.addTensor("present.0", DType::F32,
                                {1, 1, PlanDim::dynamic(kMaxSeq), kDim});
  int32_t sum = d.addTensor("sum", DType::F32, {1, 1, kDim});
  int32_t logits = d.addTensor("logits", DType::F32, {1, 1, kVocab});
  fb::AxisAttrsT axis0;
  d.addStep(OpKind::Gather, "embed", {embed, ids}, {row}, attrs(axis0));
  d.addStep(OpKind::Reshape, "row4", {row, shape}, {row4},
            attrs(fb::ReshapeAttrsT()));
  fb::AxisAttrsT concatAxis;
  concatAxis.axis = 2;
  d.addStep(OpKind::Concat, "cat", {cache, row4}, {present}, attrs(concatAxis));
  fb::ReduceAttrsT reduce;
  reduce.keepdims = false;
  d.addStep(OpKind::ReduceSum, "sum", {present, axes}, {sum}, attrs(reduce));
  d.addStep(OpKind::MatMul, "proj", {sum, proj}, {logits});
  d.addOutput(logits);
  d.addOutput(present);
  if (options.plain) {
    auto bytes = writer.serialize();
    return bytes.ok() ? *bytes : std::vector<uint8_t>();
  }

  ScheduleBuilder &p = writer.prefillSchedule(0);
  PlanDim n = PlanDim::symbol(prompt);
  int32_t pIds = addTokenInputs(p, n).ids;
  int32_t pEmbed = p.addSharedWeight("embed", 0, embed);
  int32_t pProj = p.addSharedWeight("proj", 0, proj);
  const int64_t axis1[] = {1};
  int32_t pAxes = p.addWeight("axes1", DType::I64, {1}, axis1, 8);
  const int64_t scalarAxis = 1;
  int32_t pAxis = p.addWeight("axis1", DType::I64, {}, &scalarAxis, 8);
  int32_t rows = p.addTensor("rows", DType::F32, {1, n, kDim});
  int32_t start = p.addTensor("cache.0", DType::F32, {1, 1, n, kDim});
  int32_t running = p.addTensor("running", DType::F32, {1, n, kDim});
  int32_t pLogits = p.addTensor("logits", DType::F32, {1, n, kVocab});
  p.addStep(OpKind::Gather, "embed", {pEmbed, pIds}, {rows}, attrs(axis0));
  p.addStep(OpKind::Unsqueeze, "cache", {rows, pAxes}, {start});
  p.addStep(OpKind::CumSum, "running", {rows, pAxis}, {running},
            attrs(fb::CumSumAttrsT()));
  p.addStep(OpKind::MatMul, "proj", {running, pProj}, {pLogits});
  p.addOutput(pLogits);
  p.addOutput(start);

  setGenerationTable(writer, options.badPairInput ? "nothing" : "past.0",
                     "cache.0");
  auto bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

std::unique_ptr<Plan> loadPlan(const PlanOptions &options = {}) {
  std::vector<uint8_t> bytes = writePlan(options);
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? std::move(*plan) : nullptr;
}

void expectNear(const std::vector<float> &got, const std::vector<float> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5) << "logit " << i;
}

TEST(Generator, LoadsTheGenerationTable) {
  std::unique_ptr<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->versionMinor(), detail::kFormatVersionMinorGeneration);
  const GenerationDesc *gen = plan->generation();
  ASSERT_NE(gen, nullptr);
  EXPECT_EQ(gen->maxSeq, kMaxSeq);
  EXPECT_EQ(gen->vocabSize, kVocab);
  EXPECT_TRUE(gen->hasPrefill);
  ASSERT_EQ(gen->cache.size(), 1u);
  EXPECT_EQ(gen->cache[0].prefillOutput, "cache.0");
  // One copy of the cache at max_seq: 8 positions of 2 floats.
  EXPECT_EQ(gen->cacheBytes, uint64_t{kMaxSeq * kDim * 4});
  EXPECT_EQ(plan->prefillInputs().size(), 2u);
  EXPECT_THAT(describePlanText(*plan),
              HasSubstr("cache layer 0 axis 2: 'past.0' -> 'present.0' "
                        "(prefill 'cache.0')"));
}

TEST(Generator, GreedyMatchesTheModel) {
  std::unique_ptr<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  auto gen = Generator::create(*plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  // Two buffers of max_seq positions.
  EXPECT_EQ((*gen)->cacheBytes(), uint64_t{2 * kMaxSeq * kDim * 4});
  std::vector<int64_t> prompt = {1, 2};
  GenerateOptions options;
  options.maxNewTokens = 6;
  std::vector<int64_t> streamed;
  auto tokens = (*gen)->generate(prompt, options,
                                 [&](int64_t t) { streamed.push_back(t); });
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  std::vector<int64_t> seen = prompt, want;
  for (int i = 0; i < 6; ++i) {
    int64_t next = argmax(expectedLogits(seen));
    want.push_back(next);
    seen.push_back(next);
  }
  EXPECT_EQ(*tokens, want);
  EXPECT_EQ(streamed, want);
  // The last logits are those the last token was drawn from.
  seen.pop_back();
  expectNear((*gen)->logits(), expectedLogits(seen));
  EXPECT_EQ((*gen)->length(), 7);
  const GenerationTimes &times = (*gen)->times();
  EXPECT_EQ(times.promptTokens, 2);
  EXPECT_EQ(times.newTokens, 6);
  EXPECT_EQ(times.decodeSteps, 5);
  // Each session ran its steps: the prefill once, the decode per step.
  EXPECT_EQ((*gen)->prefillSession().stepStats().front().calls, 1u);
  EXPECT_EQ((*gen)->decodeSession().stepStats().front().calls, 5u);
}

TEST(Generator, StopRequestedEndsTheGenerationAfterThatToken) {
  std::unique_ptr<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  auto gen = Generator::create(*plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  GenerateOptions options;
  options.maxNewTokens = 6;
  auto all = (*gen)->generate({1, 2}, options);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_FALSE((*gen)->times().stoppedEarly);
  // Asked once per token, after onToken: true after the second ends it
  // there, with no decode step past that token.
  std::vector<int64_t> streamed;
  int asked = 0;
  options.stopRequested = [&] {
    ++asked;
    return streamed.size() == 2;
  };
  uint64_t decodesBefore = (*gen)->decodeSession().stepStats().front().calls;
  auto ids = (*gen)->generate({1, 2}, options,
                              [&](int64_t t) { streamed.push_back(t); });
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, std::vector<int64_t>(all->begin(), all->begin() + 2));
  EXPECT_EQ(streamed, *ids);
  EXPECT_EQ(asked, 2);
  const GenerationTimes &times = (*gen)->times();
  EXPECT_TRUE(times.stoppedEarly);
  EXPECT_EQ(times.newTokens, 2);
  EXPECT_EQ(times.decodeSteps, 1);
  EXPECT_EQ((*gen)->decodeSession().stepStats().front().calls - decodesBefore,
            1u);
  EXPECT_EQ((*gen)->length(), 3);
  // Never true: every token, and the last one is not asked about.
  asked = 0;
  options.stopRequested = [&] {
    ++asked;
    return false;
  };
  auto again = (*gen)->generate({1, 2}, options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *all);
  EXPECT_EQ(asked, 5);
  EXPECT_FALSE((*gen)->times().stoppedEarly);
}

TEST(Generator, PrefillAndDecodeSteps) {
  std::unique_ptr<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  auto gen = Generator::create(*plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  Generator &g = **gen;
  ASSERT_TRUE(g.prefill({4}).ok());
  expectNear(g.logits(), expectedLogits({4}));
  std::vector<int64_t> seen = {4};
  for (int64_t token : {0, 3, 3, 1, 2, 4, 0}) {
    ASSERT_TRUE(g.decode(token).ok());
    seen.push_back(token);
    expectNear(g.logits(), expectedLogits(seen));
  }
  EXPECT_EQ(g.length(), kMaxSeq);
  EXPECT_THAT(g.decode(1).message(), HasSubstr("max_seq of 8"));
  // A new prefill starts over.
  ASSERT_TRUE(g.prefill({2, 2, 2}).ok());
  expectNear(g.logits(), expectedLogits({2, 2, 2}));
  ASSERT_TRUE(g.decode(1).ok());
  expectNear(g.logits(), expectedLogits({2, 2, 2, 1}));
}

TEST(Generator, OneScheduleRunsThePromptWithAnEmptyPast) {
  std::vector<uint8_t> bytes = writeSingleSchedulePlan();
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE((*plan)->generation()->hasPrefill);
  auto gen = Generator::create(**plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  Generator &g = **gen;
  ASSERT_TRUE(g.prefill({1, 2, 3}).ok());
  expectNear(g.logits(), expectedLogits({1, 2, 3}));
  EXPECT_EQ(&g.prefillSession(), &g.decodeSession());
  ASSERT_TRUE(g.decode(4).ok());
  expectNear(g.logits(), expectedLogits({1, 2, 3, 4}));
  // The same greedy tokens as the plan with a prefill schedule.
  std::unique_ptr<Plan> withPrefill = loadPlan();
  ASSERT_TRUE(withPrefill);
  auto other = Generator::create(*withPrefill, {/*threads=*/1});
  ASSERT_TRUE(other.ok());
  GenerateOptions options;
  options.maxNewTokens = 5;
  auto a = g.generate({0, 4}, options);
  auto b = (*other)->generate({0, 4}, options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(Generator, RejectsWhatDoesNotFit) {
  std::unique_ptr<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  auto gen = Generator::create(*plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  GenerateOptions options;
  options.maxNewTokens = 7;
  EXPECT_THAT((*gen)->generate({1, 2}, options).status().message(),
              HasSubstr("the prompt's 2 tokens plus 7 new ones make 9, more "
                        "than the plan's max_seq of 8"));
  options.maxNewTokens = 1;
  EXPECT_THAT((*gen)->generate({1, 5}, options).status().message(),
              HasSubstr("token id 5 at position 1 is outside the vocabulary "
                        "[0, 5)"));
  EXPECT_THAT((*gen)->decode(1).message(), HasSubstr("decode before prefill"));
  options.sampling.topP = 0;
  EXPECT_THAT((*gen)->generate({1}, options).status().message(),
              HasSubstr("top-p must be in (0, 1]"));
}

TEST(Generator, NeedsAGenerationPlan) {
  std::unique_ptr<Plan> plan = loadPlan({.plain = true});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->generation(), nullptr);
  EXPECT_EQ(plan->versionMinor(), kFormatVersionMinorBase);
  auto gen = Generator::create(*plan);
  EXPECT_THAT(gen.status().message(), HasSubstr("not a generation plan"));
}

TEST(Generator, LoaderChecksTheGenerationTable) {
  std::vector<uint8_t> bad = writePlan({.badPairInput = true});
  EXPECT_THAT(Plan::loadFromMemory(bad.data(), bad.size()).status().message(),
              HasSubstr("generation: schedule 0: cache pair 0 'nothing' is "
                        "not a graph input of the schedule"));
  std::vector<uint8_t> extra = writePlan({.extraInput = true});
  EXPECT_THAT(
      Plan::loadFromMemory(extra.data(), extra.size()).status().message(),
      HasSubstr("graph input 'attention_mask' is neither the tokens, the "
                "positions nor a cache"));
}

TEST(Generator, ProgramDamageNeverCrashes) {
  // Damage behind valid checksums reaches the generation table's checks;
  // whatever still loads must generate, or fail, cleanly.
  std::vector<uint8_t> bytes = writePlan();
  detail::SectionEntry program =
      detail::decodeSection(bytes.data() + kFileHeaderSize);
  int rejected = 0;
  for (size_t i = 0; i < program.size; ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}}) {
      std::vector<uint8_t> damaged = testing::flipProgram(bytes, i, mask);
      auto plan = Plan::loadFromMemory(damaged.data(), damaged.size());
      if (!plan.ok()) {
        ++rejected;
        EXPECT_FALSE(plan.status().message().empty());
        continue;
      }
      auto gen = Generator::create(**plan, {/*threads=*/1});
      if (!gen.ok())
        continue;
      GenerateOptions options;
      options.maxNewTokens = 3;
      (void)(*gen)->generate({1, 2}, options);
    }
  }
  EXPECT_GT(rejected, static_cast<int>(program.size));
}

TEST(Sampler, IsSeededAndFollowsTheOptions) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  // Greedy: the first of the largest.
  EXPECT_EQ(Sampler({}).sample(logits.data(), 5), 1);
  SamplingOptions options;
  options.temperature = 1.5;
  options.seed = 42;
  auto draw = [&](SamplingOptions o) {
    Sampler sampler(o);
    std::vector<int64_t> ids;
    for (int i = 0; i < 64; ++i)
      ids.push_back(sampler.sample(logits.data(), 5));
    return ids;
  };
  std::vector<int64_t> a = draw(options), b = draw(options);
  EXPECT_EQ(a, b);
  options.seed = 43;
  EXPECT_NE(draw(options), a);
  // Top-k 2 keeps the two 3.0s (ids 1 and 3); both are drawn.
  options.topK = 2;
  std::vector<int64_t> top2 = draw(options);
  EXPECT_TRUE(std::all_of(top2.begin(), top2.end(),
                          [](int64_t id) { return id == 1 || id == 3; }));
  EXPECT_NE(std::count(top2.begin(), top2.end(), 1), 0);
  EXPECT_NE(std::count(top2.begin(), top2.end(), 3), 0);
  // A tiny top-p keeps only the most likely id (the lower of the ties).
  options.topK = 0;
  options.topP = 0.01;
  std::vector<int64_t> top = draw(options);
  EXPECT_TRUE(
      std::all_of(top.begin(), top.end(), [](int64_t id) { return id == 1; }));
  // splitmix64's first value for seed 0 (its published test vector
  // 0xe220a8397b1dcdaf), as a double in [0, 1).
  Sampler zero({});
  EXPECT_DOUBLE_EQ(zero.uniform(),
                   static_cast<double>(0xe220a8397b1dcdafull >> 11) *
                       0x1.0p-53);
}

} // namespace
} // namespace moert
