//===- group_generator_test.cpp - moert::GroupGenerator over a written plan
//===//
//
// A tiny expert-parallel generation plan written with the plan writer: each
// device's one schedule (no prefill; the prompt runs with an empty past)
// embeds the tokens, appends them to its cache, sums the cache and projects
// the mean of every device's sum to logits: the devices exchange their sums
// through an AllToAll step (each sends its sum to every device), so that
// the logits are right only when every device ran the same tokens in the
// same step, and they are the same for every device count.
// The tests run the real loader, sessions, in-process communicators and
// GroupGenerator, and compare with the arithmetic done here.
//
//===----------------------------------------------------------------------===//

#include "format/plan_writer.h"
#include "generation_model.h"
#include "moert/group_generator.h"
#include "plan_bytes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moert {
namespace {

using ::testing::HasSubstr;
using namespace ::moert::test;
using ::testing::Not;

/// The plan of `devices` devices (one schedule each, the same steps).
std::vector<uint8_t> writePlan(int devices) {
  using fb::OpKind;
  PlanWriter writer({Backend::Cpu, static_cast<uint32_t>(devices)},
                    "group_generator_test");
  int past = writer.addSymbol("past", 0, kMaxSeq - 1);
  int tokens = writer.addSymbol("n", 1, kMaxSeq - 1);
  int32_t embed = -1, proj = -1;
  for (int device = 0; device < devices; ++device) {
    ScheduleBuilder &d = writer.schedule(device);
    PlanDim n = PlanDim::symbol(tokens);
    auto [ids, pos, cache] = addDecodeInputs(d, n, past);
    int32_t e, p;
    if (device == 0) {
      embed = e =
          d.addWeight("embed", DType::F32, {kVocab, kDim}, kEmbed.data(), 40);
      proj = p =
          d.addWeight("proj", DType::F32, {kDim, kVocab}, kProj.data(), 40);
    } else {
      e = d.addSharedWeight("embed", 0, embed);
      p = d.addSharedWeight("proj", 0, proj);
    }
    const int64_t axis1[] = {1}, axis2[] = {2}, axis0[] = {0};
    int32_t unsqueezeAxes = d.addWeight("axes1", DType::I64, {1}, axis1, 8);
    int32_t sumAxes = d.addWeight("axes2", DType::I64, {1}, axis2, 8);
    int32_t rowAxes = d.addWeight("axes0", DType::I64, {1}, axis0, 8);
    std::vector<int64_t> ones(devices, 1);
    int32_t send = d.addWeight("send", DType::I64, {devices}, ones.data(),
                               8 * ones.size());
    int32_t rows = d.addTensor("rows", DType::F32, {1, n, kDim});
    int32_t rows4 = d.addTensor("rows4", DType::F32, {1, 1, n, kDim});
    int32_t present = d.addTensor("present.0", DType::F32,
                                  {1, 1, PlanDim::dynamic(kMaxSeq), kDim});
    int32_t sum = d.addTensor("sum", DType::F32, {1, 1, kDim});
    int32_t copies = d.addTensor("copies", DType::F32, {devices, 1, kDim});
    int32_t received = d.addTensor("received", DType::F32, {devices, 1, kDim});
    int32_t counts = d.addTensor("counts", DType::I64, {devices});
    int32_t total = d.addTensor("total", DType::F32, {1, 1, kDim});
    int32_t logits = d.addTensor("logits", DType::F32, {1, 1, kVocab});
    fb::AxisAttrsT gatherAxis;
    d.addStep(OpKind::Gather, "embed", {e, ids}, {rows}, attrs(gatherAxis));
    d.addStep(OpKind::Unsqueeze, "rows4", {rows, unsqueezeAxes}, {rows4});
    fb::AxisAttrsT concatAxis;
    concatAxis.axis = 2;
    d.addStep(OpKind::Concat, "cat", {cache, rows4}, {present},
              attrs(concatAxis));
    fb::ReduceAttrsT reduce;
    reduce.keepdims = false;
    d.addStep(OpKind::ReduceSum, "sum", {present, sumAxes}, {sum},
              attrs(reduce));
    // A plan of one device has no exchange (as `moec compile` writes
    // them); the others send one copy of the sum to every device and take
    // the mean of what they receive.
    if (devices == 1) {
      d.addStep(OpKind::MatMul, "proj", {sum, p}, {logits});
    } else {
      // One copy of the sum for every device, and every device's back.
      fb::AxisAttrsT stackAxis;
      std::vector<int32_t> parts(devices, sum);
      d.addStep(OpKind::Concat, "copies", parts, {copies}, attrs(stackAxis));
      fb::CollectiveAttrsT collective;
      collective.num_devices = devices;
      d.addStep(OpKind::AllToAll, "exchange", {copies, send},
                {received, counts}, attrs(collective));
      fb::ReduceAttrsT keep;
      keep.keepdims = true;
      d.addStep(OpKind::ReduceMean, "total", {received, rowAxes}, {total},
                attrs(keep));
      d.addStep(OpKind::MatMul, "proj", {total, p}, {logits});
    }
    d.addOutput(logits);
    d.addOutput(present);
  }
  setGenerationTable(writer, "past.0", "present.0");
  auto bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

std::unique_ptr<Plan> loadPlan(int devices) {
  std::vector<uint8_t> bytes = writePlan(devices);
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? std::move(*plan) : nullptr;
}

/// The generator of every device of `plan`, one thread each.
std::unique_ptr<GroupGenerator> createGroup(const Plan &plan) {
  GroupGeneratorOptions options;
  options.threadsPerDevice = 1;
  auto group = GroupGenerator::create(plan, options);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::move(*group) : nullptr;
}

TEST(GroupGenerator, GreedyMatchesTheModelOnEveryDeviceCount) {
  for (int devices : {1, 2, 3}) {
    SCOPED_TRACE(devices);
    std::unique_ptr<Plan> plan = loadPlan(devices);
    ASSERT_TRUE(plan);
    std::unique_ptr<GroupGenerator> group = createGroup(*plan);
    ASSERT_TRUE(group);
    EXPECT_EQ(group->numDevices(), devices);
    EXPECT_TRUE(group->isRoot());
    ASSERT_EQ(group->localGenerators().size(), size_t(devices));
    std::vector<int64_t> sequence = {3, 1};
    std::vector<int64_t> seen;
    GenerateOptions options;
    options.maxNewTokens = 5;
    auto ids = group->generate(sequence, options, [&](int64_t token) {
      std::vector<float> logits = group->logits();
      std::vector<float> want = expectedLogits(sequence);
      ASSERT_EQ(logits.size(), want.size());
      for (size_t v = 0; v < want.size(); ++v)
        EXPECT_NEAR(logits[v], want[v], 1e-5) << "logit " << v;
      EXPECT_EQ(token, argmax(want));
      sequence.push_back(token);
      seen.push_back(token);
    });
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, seen);
    EXPECT_EQ(ids->size(), 5u);
    EXPECT_EQ(group->length(), 6);
    EXPECT_EQ(group->times().decodeSteps, 4);
    // Every device exchanged once per step: 1 prefill and 4 decodes (one
    // device has nothing to exchange).
    auto stats = group->deviceStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    ASSERT_EQ(stats->size(), size_t(devices));
    for (int d = 0; d < devices; ++d) {
      EXPECT_EQ((*stats)[d].device, d);
      EXPECT_EQ((*stats)[d].comm.exchanges, devices > 1 ? 5u : 0u);
    }
  }
}

TEST(GroupGenerator, SampledIdsDoNotDependOnTheDeviceCount) {
  GenerateOptions options;
  options.maxNewTokens = 6;
  options.sampling.temperature = 1.0;
  options.sampling.topK = 4;
  options.sampling.seed = 42;
  std::unique_ptr<Plan> single = loadPlan(1);
  ASSERT_TRUE(single);
  auto generator = Generator::create(*single, {/*threads=*/1});
  ASSERT_TRUE(generator.ok()) << generator.status();
  auto want = (*generator)->generate({2}, options);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int devices : {1, 2, 3}) {
    SCOPED_TRACE(devices);
    std::unique_ptr<Plan> plan = loadPlan(devices);
    ASSERT_TRUE(plan);
    std::unique_ptr<GroupGenerator> group = createGroup(*plan);
    ASSERT_TRUE(group);
    auto ids = group->generate({2}, options);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, *want);
  }
}

TEST(GroupGenerator, StopRequestedStopsEveryDevice) {
  std::unique_ptr<Plan> plan = loadPlan(2);
  ASSERT_TRUE(plan);
  std::unique_ptr<GroupGenerator> group = createGroup(*plan);
  ASSERT_TRUE(group);
  GenerateOptions options;
  options.maxNewTokens = 6;
  auto all = group->generate({3, 1}, options);
  ASSERT_TRUE(all.ok()) << all.status();
  auto before = group->deviceStats();
  ASSERT_TRUE(before.ok()) << before.status();
  int tokens = 0;
  options.stopRequested = [&] { return tokens == 3; };
  auto ids = group->generate({3, 1}, options, [&](int64_t) { ++tokens; });
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, std::vector<int64_t>(all->begin(), all->begin() + 3));
  EXPECT_TRUE(group->times().stoppedEarly);
  EXPECT_EQ(group->length(), 4);
  // Both devices ran the prefill and two decodes, no more.
  auto after = group->deviceStats();
  ASSERT_TRUE(after.ok()) << after.status();
  for (int d = 0; d < 2; ++d)
    EXPECT_EQ((*after)[d].comm.exchanges - (*before)[d].comm.exchanges, 3u);
  // The group runs on after a stop.
  options.stopRequested = nullptr;
  auto next = group->generate({3, 1}, options);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, *all);
}

TEST(GroupGenerator, ErrorsAreReportedOnceNotPerDevice) {
  std::unique_ptr<Plan> plan = loadPlan(2);
  ASSERT_TRUE(plan);
  std::unique_ptr<GroupGenerator> group = createGroup(*plan);
  ASSERT_TRUE(group);
  GenerateOptions options;
  options.maxNewTokens = 2;
  auto outside = group->generate({1, 7}, options);
  ASSERT_FALSE(outside.ok());
  EXPECT_THAT(outside.status().message(),
              HasSubstr("token id 7 at position 1 is outside the vocabulary "
                        "[0, 5)"));
  EXPECT_THAT(outside.status().message(), Not(HasSubstr("device")));
  options.maxNewTokens = 8;
  auto tooLong = group->generate({1}, options);
  ASSERT_FALSE(tooLong.ok());
  EXPECT_THAT(tooLong.status().message(),
              HasSubstr("more than the plan's max_seq of 8"));
  EXPECT_FALSE(group->decode(1).ok());
  // A failed call leaves the group usable.
  options.maxNewTokens = 2;
  auto ids = group->generate({1}, options);
  EXPECT_TRUE(ids.ok()) << ids.status();
}

TEST(GroupGenerator, OneDeviceOfAGroupNeedsItsEndpoint) {
  std::unique_ptr<Plan> plan = loadPlan(2);
  ASSERT_TRUE(plan);
  auto alone = Generator::create(*plan);
  ASSERT_FALSE(alone.ok());
  EXPECT_THAT(alone.status().message(),
              HasSubstr("the plan has 2 device schedules; generate with "
                        "moert::GroupGenerator"));
  std::vector<std::unique_ptr<Communicator>> comms = createInProcessGroup(2);
  SessionOptions options;
  options.device = 2;
  options.communicator = comms[0].get();
  auto outside = Generator::create(*plan, options);
  ASSERT_FALSE(outside.ok());
  EXPECT_THAT(outside.status().message(),
              HasSubstr("device 2 is not among the plan's 2"));
}

TEST(GroupGenerator, NeedsAGenerationPlan) {
  PlanWriter writer({Backend::Cpu, 1}, "group_generator_test");
  ScheduleBuilder &d = writer.schedule(0);
  int32_t x = d.addTensor("x", DType::F32, {1});
  int32_t y = d.addTensor("y", DType::F32, {1});
  d.addInput(x);
  d.addStep(fb::OpKind::Concat, "copy", {x}, {y}, attrs(fb::AxisAttrsT()));
  d.addOutput(y);
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plain = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto group = GroupGenerator::create(**plain);
  ASSERT_FALSE(group.ok());
  EXPECT_THAT(group.status().message(), HasSubstr("not a generation plan"));
}

} // namespace
} // namespace moert
