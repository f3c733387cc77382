//===- batch_generator_test.cpp - Continuous batching ---------------------===//

#include "moert/batch_generator.h"

#include "format/plan_file.h"
#include "generation_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <map>

namespace moert::test {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Plan> loadPlan(bool batchable) {
  AttentionPlanOptions options;
  options.batchable = batchable;
  std::vector<uint8_t> bytes = writeAttentionGenerationPlan(options);
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : nullptr;
}

/// The greedy ids of the attention model after `prompt`.
std::vector<int64_t> greedy(std::vector<int64_t> seen, int64_t count) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) {
    ids.push_back(argmax(attentionLogits(seen)));
    seen.push_back(ids.back());
  }
  return ids;
}

struct Drawn {
  std::map<int64_t, std::vector<int64_t>> ids;
  std::map<int64_t, FinishReason> finish;
  int maxInUse = 0;
};

/// Steps `batch` until it has no work, checking every drawn token's logits
/// against the model's (with keepLogits).
Drawn runAll(BatchGenerator &batch,
             const std::map<int64_t, std::vector<int64_t>> &prompts) {
  Drawn run;
  while (batch.hasWork()) {
    auto events = batch.step();
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok())
      break;
    run.maxInUse = std::max(run.maxInUse, batch.slotsInUse());
    for (const SequenceEvent &e : *events) {
      if (e.token >= 0) {
        std::vector<int64_t> seen = prompts.at(e.sequence);
        seen.insert(seen.end(), run.ids[e.sequence].begin(),
                    run.ids[e.sequence].end());
        std::vector<float> want = attentionLogits(seen);
        std::vector<float> got = batch.lastLogits(e.sequence);
        if (e.finish == FinishReason::None) {
          EXPECT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size() && i < want.size(); ++i)
            EXPECT_NEAR(got[i], want[i], 1e-5);
        }
        run.ids[e.sequence].push_back(e.token);
      }
      if (e.finish != FinishReason::None)
        run.finish[e.sequence] = e.finish;
    }
  }
  return run;
}

TEST(BatchGenerator, EverySequenceDrawsItsOwnGreedyIds) {
  std::unique_ptr<Plan> plan = loadPlan(/*batchable=*/true);
  ASSERT_TRUE(plan);
  BatchOptions options;
  options.slots = 3;
  options.keepLogits = true;
  auto batch = BatchGenerator::create(*plan, {/*threads=*/2}, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  BatchGenerator &b = **batch;
  EXPECT_EQ(b.batchBlocker(), "");
  EXPECT_EQ(b.slots(), 3);
  EXPECT_EQ(b.maxStepRows(), kMaxSeq - 1);
  // One pool of 3 slots × 8 positions × 2 floats.
  EXPECT_EQ(b.poolBytes(), uint64_t{3 * kMaxSeq * kDim * 4});
  std::vector<std::vector<int64_t>> prompts = {
      {1, 2}, {4}, {0, 3, 3}, {2, 2, 1, 0}, {3}};
  std::vector<int64_t> counts = {6, 7, 4, 3, 5};
  std::map<int64_t, std::vector<int64_t>> byId;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions generate;
    generate.maxNewTokens = counts[i];
    auto id = b.add(prompts[i], generate);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, static_cast<int64_t>(i + 1));
    byId[*id] = prompts[i];
  }
  EXPECT_EQ(b.waiting(), 5);
  Drawn run = runAll(b, byId);
  EXPECT_EQ(run.maxInUse, 3);
  for (size_t i = 0; i < prompts.size(); ++i) {
    int64_t id = static_cast<int64_t>(i + 1);
    EXPECT_EQ(run.ids[id], greedy(prompts[i], counts[i])) << "sequence " << id;
    EXPECT_EQ(run.finish[id], FinishReason::Length);
  }
  EXPECT_EQ(b.slotsInUse(), 0);
  EXPECT_EQ(b.waiting(), 0);
  BatchStats stats = b.stats();
  EXPECT_EQ(stats.promptRows, 1 + 2 + 3 + 4 + 1);
  EXPECT_EQ(stats.newTokens, 6 + 7 + 4 + 3 + 5);
  // Every token but each sequence's last is fed back as a row.
  EXPECT_EQ(stats.rows, stats.promptRows + stats.newTokens - 5);
  // Batched: fewer steps than rows.
  EXPECT_LT(stats.steps, stats.rows);
  // The model has no MoE layer.
  EXPECT_TRUE(b.expertSelections().empty());
}

TEST(BatchGenerator, FeedsLongPromptsInChunks) {
  std::unique_ptr<Plan> plan = loadPlan(/*batchable=*/true);
  ASSERT_TRUE(plan);
  BatchOptions options;
  options.slots = 2;
  options.maxStepRows = 3;
  options.keepLogits = true;
  auto batch = BatchGenerator::create(*plan, {/*threads=*/1}, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  BatchGenerator &b = **batch;
  EXPECT_EQ(b.maxStepRows(), 3);
  std::map<int64_t, std::vector<int64_t>> byId;
  GenerateOptions generate;
  generate.maxNewTokens = 2;
  for (const std::vector<int64_t> &prompt :
       {std::vector<int64_t>{4, 3, 2, 1, 0, 1}, {1, 1, 2, 3, 4}})
    byId[*b.add(prompt, generate)] = prompt;
  Drawn run = runAll(b, byId);
  for (const auto &[id, prompt] : byId)
    EXPECT_EQ(run.ids[id], greedy(prompt, 2)) << "sequence " << id;
  // 11 prompt rows and 2 decode rows, at most 3 a step.
  EXPECT_GE(b.stats().steps, 5);
}

TEST(BatchGenerator, StopsAndCancels) {
  std::unique_ptr<Plan> plan = loadPlan(/*batchable=*/true);
  ASSERT_TRUE(plan);
  BatchOptions options;
  options.slots = 2;
  auto batch = BatchGenerator::create(*plan, {/*threads=*/1}, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  BatchGenerator &b = **batch;
  std::vector<int64_t> want = greedy({1, 2}, 6);
  GenerateOptions stopping;
  stopping.maxNewTokens = 6;
  stopping.stopIds = {want[2]};
  int64_t stopped = *b.add({1, 2}, stopping);
  GenerateOptions longer;
  longer.maxNewTokens = 6;
  int64_t cancelled = *b.add({4}, longer);
  int64_t queued = *b.add({3}, longer);
  EXPECT_FALSE(b.cancel(99));
  EXPECT_TRUE(b.cancel(queued));
  EXPECT_FALSE(b.cancel(queued));
  std::map<int64_t, std::vector<int64_t>> ids;
  std::map<int64_t, FinishReason> finish;
  for (int step = 0; b.hasWork(); ++step) {
    if (step == 2) {
      EXPECT_TRUE(b.cancel(cancelled));
    }
    auto events = b.step();
    ASSERT_TRUE(events.ok()) << events.status();
    for (const SequenceEvent &e : *events) {
      if (e.token >= 0)
        ids[e.sequence].push_back(e.token);
      if (e.finish != FinishReason::None)
        finish[e.sequence] = e.finish;
    }
  }
  // The stop id ends its sequence after the first time it is drawn.
  size_t first = std::find(want.begin(), want.end(), want[2]) - want.begin();
  EXPECT_EQ(ids[stopped],
            std::vector<int64_t>(want.begin(), want.begin() + first + 1));
  EXPECT_EQ(finish[stopped], FinishReason::Stop);
  EXPECT_EQ(finish[cancelled], FinishReason::Cancelled);
  EXPECT_EQ(ids[cancelled], greedy({4}, 2));
  EXPECT_EQ(ids.count(queued), 0u);
  EXPECT_EQ(b.slotsInUse(), 0);
}

TEST(BatchGenerator, ServesOneSequenceAtATimeWithoutTheVerdict) {
  std::unique_ptr<Plan> plan = loadPlan(/*batchable=*/false);
  ASSERT_TRUE(plan);
  BatchOptions options;
  options.slots = 4;
  options.keepLogits = true;
  auto batch = BatchGenerator::create(*plan, {/*threads=*/1}, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  BatchGenerator &b = **batch;
  EXPECT_THAT(b.batchBlocker(), HasSubstr("the compiler did not prove"));
  EXPECT_EQ(b.slots(), 1);
  std::map<int64_t, std::vector<int64_t>> byId;
  GenerateOptions generate;
  generate.maxNewTokens = 4;
  for (const std::vector<int64_t> &prompt :
       {std::vector<int64_t>{1, 2}, {4}, {0, 3}})
    byId[*b.add(prompt, generate)] = prompt;
  Drawn run = runAll(b, byId);
  EXPECT_EQ(run.maxInUse, 1);
  for (const auto &[id, prompt] : byId)
    EXPECT_EQ(run.ids[id], greedy(prompt, 4)) << "sequence " << id;
}

TEST(BatchGenerator, TheVerdictNeedsPrefillSchedulesAndItsVersion) {
  std::unique_ptr<Plan> plan = loadPlan(/*batchable=*/true);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->versionMinor(), detail::kFormatVersionMinorBatchRows);
  EXPECT_TRUE(plan->generation()->batchable);
  AttentionPlanOptions options;
  options.prefill = false;
  options.batchable = true;
  std::vector<uint8_t> bytes = writeAttentionGenerationPlan(options);
  EXPECT_THAT(
      Plan::loadFromMemory(bytes.data(), bytes.size()).status().message(),
      HasSubstr("generation: batchable without prefill schedules"));
}

TEST(BatchGenerator, AttentionWindowsNeedTheVerdictAndOnePerStep) {
  AttentionPlanOptions options;
  options.batchWindows = {3};
  std::vector<uint8_t> bytes = writeAttentionGenerationPlan(options);
  EXPECT_THAT(
      Plan::loadFromMemory(bytes.data(), bytes.size()).status().message(),
      HasSubstr("generation: batch_windows without batchable"));

  options.batchable = true;
  bytes = writeAttentionGenerationPlan(options);
  absl::StatusOr<std::unique_ptr<Plan>> plan =
      Plan::loadFromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorBatchWindows);
  EXPECT_EQ((*plan)->generation()->batchWindows, std::vector<int64_t>{3});

  // The plan's prefill schedule has one Attention step: two windows do not
  // fit it, and the generator serves one sequence at a time.
  options.batchWindows = {3, 0};
  bytes = writeAttentionGenerationPlan(options);
  plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  BatchOptions batch;
  batch.slots = 2;
  absl::StatusOr<std::unique_ptr<BatchGenerator>> generator =
      BatchGenerator::create(**plan, {/*threads=*/1}, batch);
  ASSERT_TRUE(generator.ok()) << generator.status();
  EXPECT_THAT((*generator)->batchBlocker(),
              HasSubstr("the plan gives 2 attention windows for 1 attention "
                        "steps"));
}

TEST(BatchGenerator, RefusesWhatDoesNotFit) {
  std::unique_ptr<Plan> plan = loadPlan(/*batchable=*/true);
  ASSERT_TRUE(plan);
  BatchOptions options;
  options.slots = 0;
  EXPECT_THAT(BatchGenerator::create(*plan, {}, options).status().message(),
              HasSubstr("slots must be in [1, 4096], not 0"));
  options.slots = kMaxSeq;
  EXPECT_THAT(BatchGenerator::create(*plan, {}, options).status().message(),
              HasSubstr("8 slots need a step of as many rows; a step runs at "
                        "most 7"));
  options.slots = 2;
  auto batch = BatchGenerator::create(*plan, {/*threads=*/1}, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  GenerateOptions generate;
  generate.maxNewTokens = 4;
  EXPECT_THAT((*batch)->add({1, 9}, generate).status().message(),
              HasSubstr("outside the vocabulary"));
  generate.maxNewTokens = kMaxSeq;
  EXPECT_FALSE((*batch)->add({1}, generate).ok());
  EXPECT_FALSE((*batch)->hasWork());
  auto none = (*batch)->step();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

} // namespace
} // namespace moert::test
