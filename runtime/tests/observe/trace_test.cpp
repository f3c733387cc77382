//===- trace_test.cpp - Recording the runs of a session -------------------===//
//
// moert/trace.h over the MoE layer plan of ep_plans.h: a span per step per
// run from the stats' clock reads, the run's routing, nothing while no
// recorder is attached, cleared with the stats, the last maxRuns runs kept,
// the byte image for MPI gathers, and the names of the MoE steps.
//
//===----------------------------------------------------------------------===//

#include "ep_plans.h"
#include "moert/device_group.h"
#include "moert/trace.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace moert::testing {
namespace {

struct LayerSession {
  std::unique_ptr<Plan> plan;
  std::unique_ptr<Session> session;
};

/// The 1-device layer plan with `tokens` rows of seeded x set.
LayerSession openLayer(int64_t tokens) {
  LayerSession out;
  absl::StatusOr<std::vector<uint8_t>> bytes = writeMoeLayerPlan(nullptr);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  out.plan = std::move(*plan);
  SessionOptions options;
  options.threads = 1;
  auto session = Session::create(*out.plan, options);
  EXPECT_TRUE(session.ok()) << session.status();
  out.session = std::move(*session);
  std::vector<float> x = randomFloats(tokens * kLayerHidden, 5);
  EXPECT_TRUE(out.session
                  ->setInput("x", DType::F32, {tokens, kLayerHidden}, x.data(),
                             x.size() * 4)
                  .ok());
  return out;
}

TEST(Trace, ASpanPerStepOfEveryRunWithItsRouting) {
  LayerSession layer = openLayer(5);
  TraceRecorder recorder;
  layer.session->setTrace(&recorder);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(layer.session->run().ok());
  size_t steps = layer.plan->numSteps();
  std::vector<StepStats> stats = layer.session->stepStats();
  // gate MatMul, Router, Dispatch, Experts, Combine.
  ASSERT_EQ(stats.size(), 5u);
  ASSERT_EQ(stats[1].op, "Router");
  ASSERT_EQ(stats[3].op, "Experts");
  ASSERT_EQ(recorder.runs().size(), 3u);
  EXPECT_EQ(recorder.runsSeen(), 3u);
  std::vector<uint64_t> summed;
  for (size_t r = 0; r < 3; ++r) {
    const TraceRun &run = recorder.runs()[r];
    EXPECT_EQ(run.index, r);
    EXPECT_GT(run.endNs, run.beginNs);
    ASSERT_EQ(run.spans.size(), steps + 1);
    EXPECT_EQ(run.spans[0].kind, TraceKind::StageInputs);
    EXPECT_EQ(run.dims[run.spans[0].shapesBegin], 2); // x: [5, 8]
    for (size_t i = 1; i <= steps; ++i) {
      const TraceSpan &span = run.spans[i];
      EXPECT_EQ(span.kind, TraceKind::Step);
      EXPECT_EQ(span.step, int32_t(i - 1));
      EXPECT_LE(run.beginNs, span.beginNs);
      EXPECT_LE(span.beginNs, span.endNs);
      EXPECT_LE(span.endNs, run.endNs);
      EXPECT_LT(span.shapesBegin, span.shapesEnd); // Its outputs' shapes.
    }
    // The router and the experts route 5 tokens x top-2 per run.
    ASSERT_EQ(run.loads.size(), 2u);
    for (const TraceLoad &load : run.loads) {
      uint64_t total = 0;
      for (uint64_t n : load.expertLoad)
        total += n;
      EXPECT_EQ(total, 5u * kLayerTopK);
      EXPECT_TRUE(load.step == 1 || load.step == 3) << load.step;
      if (load.step == 3) {
        summed.resize(load.expertLoad.size());
        for (size_t e = 0; e < summed.size(); ++e)
          summed[e] += load.expertLoad[e];
      }
    }
  }
  // The spans are the stats' own clock reads, and the runs' routing adds up
  // to theirs.
  ASSERT_EQ(summed.size(), size_t(kLayerExperts));
  EXPECT_EQ(summed, stats[3].expertLoad);
  for (size_t i = 0; i < steps; ++i) {
    double seconds = 0;
    for (const TraceRun &run : recorder.runs())
      seconds += (run.spans[i + 1].endNs - run.spans[i + 1].beginNs) * 1e-9;
    EXPECT_NEAR(seconds, stats[i].totalSeconds, 1e-6) << "step " << i;
  }

  // Detached, nothing more is recorded; resetStats clears an attached one.
  layer.session->setTrace(nullptr);
  ASSERT_TRUE(layer.session->run().ok());
  EXPECT_EQ(recorder.runs().size(), 3u);
  layer.session->setTrace(&recorder);
  layer.session->resetStats();
  EXPECT_TRUE(recorder.runs().empty());
  ASSERT_TRUE(layer.session->run().ok());
  ASSERT_EQ(recorder.runs().size(), 1u);
  // The routing of a run after a reset is that run's alone.
  EXPECT_EQ(recorder.runs()[0].loads[0].expertLoad,
            layer.session->stepStats()[1].expertLoad);
}

TEST(Trace, KeepsTheLastRunsAndNothingWithoutStats) {
  LayerSession layer = openLayer(3);
  TraceRecorder recorder(2);
  layer.session->setTrace(&recorder);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(layer.session->run().ok());
  ASSERT_EQ(recorder.runs().size(), 2u);
  EXPECT_EQ(recorder.runsSeen(), 5u);
  EXPECT_EQ(recorder.runs()[0].index, 3u);
  EXPECT_EQ(recorder.runs()[1].index, 4u);

  SessionOptions options;
  options.collectStats = false;
  auto quiet = Session::create(*layer.plan, options);
  ASSERT_TRUE(quiet.ok());
  std::vector<float> x = randomFloats(3 * kLayerHidden, 5);
  ASSERT_TRUE(
      (*quiet)
          ->setInput("x", DType::F32, {3, kLayerHidden}, x.data(), x.size() * 4)
          .ok());
  TraceRecorder none;
  (*quiet)->setTrace(&none);
  ASSERT_TRUE((*quiet)->run().ok());
  EXPECT_EQ(none.runsSeen(), 0u);
}

TEST(Trace, ByteImageRoundTripsAndRejectsMalformedBytes) {
  LayerSession layer = openLayer(4);
  TraceRecorder recorder;
  layer.session->setTrace(&recorder);
  ASSERT_TRUE(layer.session->run().ok());
  ASSERT_TRUE(layer.session->run().ok());
  std::vector<uint8_t> bytes = serializeTrace(recorder);
  absl::StatusOr<TraceRecorder> back =
      deserializeTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->runsSeen(), 2u);
  ASSERT_EQ(back->runs().size(), 2u);
  EXPECT_EQ(serializeTrace(*back), bytes);
  // Every truncation and a huge count fail cleanly.
  for (size_t size = 0; size < bytes.size(); size += 7)
    EXPECT_FALSE(deserializeTrace(bytes.data(), size).ok()) << size;
  std::vector<uint8_t> huge = bytes;
  std::memset(huge.data() + 16, 0xff, 8); // The run count.
  EXPECT_FALSE(deserializeTrace(huge.data(), huge.size()).ok());
}

TEST(Trace, NamesTheStepsOfMoeLayers) {
  auto one = writeMoeLayerPlan(nullptr);
  ASSERT_TRUE(one.ok());
  auto plan = Plan::loadFromMemory(one->data(), one->size());
  ASSERT_TRUE(plan.ok());
  std::vector<std::string> names = traceStepNames(**plan);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "MatMul", "layer 0 router", "layer 0 dispatch",
                       "layer 0 experts", "layer 0 combine"}));

  // Over two devices, with the dispatch exchange split around another step.
  Placement placement{{0, 2, 4}, {0, 1, 2, 3}};
  auto two = writeMoeLayerPlan(&placement, /*overlap=*/true);
  ASSERT_TRUE(two.ok()) << two.status();
  auto ep = Plan::loadFromMemory(two->data(), two->size());
  ASSERT_TRUE(ep.ok()) << ep.status();
  for (int d = 0; d < 2; ++d) {
    std::vector<std::string> mine = traceStepNames(**ep, d);
    ASSERT_EQ(mine.size(), (*ep)->numSteps(d));
    for (const char *part :
         {"layer 0 router", "layer 0 assign slots", "layer 0 dispatch",
          "layer 0 counts all-to-all", "layer 0 dispatch all-to-all start",
          "layer 0 dispatch all-to-all wait", "layer 0 regroup",
          "layer 0 experts", "layer 0 ungroup", "layer 0 combine all-to-all",
          "layer 0 combine"})
      EXPECT_EQ(std::count(mine.begin(), mine.end(), part), 1)
          << "device " << d << ": " << part;
  }
  EXPECT_TRUE(traceStepNames(**ep, 2).empty());
}

} // namespace
} // namespace moert::testing
