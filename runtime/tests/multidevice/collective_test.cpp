//===- collective_test.cpp - Expert parallelism: steps, comms, plans ------===//
//
// AssignSlots, Regroup and Ungroup against straightforward references; the
// in-process communicator (counts, rows, gathers, timeouts, failures); the
// loader's checks of collective steps; and whole MoE layers split over 2 and
// 4 devices whose outputs must equal the 1-device plan's.
//
//===----------------------------------------------------------------------===//

#include "ep_plans.h"
#include "moert/device_group.h"
#include "moert/stats.h"
#include "test_util.h"

#include "absl/strings/str_cat.h"

#include <chrono>
#include <numeric>
#include <random>
#include <thread>

namespace moert::testing {
namespace {

using fb::OpKind;

//===----------------------------------------------------------------------===//
// AssignSlots
//===----------------------------------------------------------------------===//

TEST(AssignSlots, SpreadsTokensOverReplicasByRow) {
  // Expert 0 has slots {0, 4}, expert 1 {1}, expert 2 {2, 3, 5}.
  std::vector<int64_t> offsets = {0, 2, 3, 6}, slots = {0, 4, 1, 2, 3, 5};
  int64_t T = 7, k = 2;
  std::mt19937 rng(3);
  std::vector<int64_t> idx(T * k);
  for (int64_t &e : idx)
    e = static_cast<int64_t>(rng() % 4) - 1;
  Value out = run1(OpKind::AssignSlots, {i64({T, k}, idx)},
                   {DType::I64, {T, k}}, slotAttrs(offsets, slots));
  std::vector<int64_t> expected(T * k);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int64_t e = idx[t * k + j];
      int64_t n = e < 0 ? 0 : offsets[e + 1] - offsets[e];
      expected[t * k + j] = e < 0 ? -1 : slots[offsets[e] + t % n];
    }
  EXPECT_EQ(out.as<int64_t>(), expected);
}

TEST(AssignSlots, RejectsExpertsOutOfRange) {
  auto result = runStep(OpKind::AssignSlots, {i64({1, 2}, {0, 2})},
                        {{DType::I64, {1, 2}}}, slotAttrs({0, 1, 2}, {0, 1}));
  EXPECT_THAT(result.status(), StatusHas("expert index 2 at [0, 1]"));
}

TEST(AssignSlots, RejectsExpertsWithoutSlots) {
  auto result = runStep(OpKind::AssignSlots, {i64({1, 1}, {0})},
                        {{DType::I64, {1, 1}}}, slotAttrs({0, 1, 1}, {0}));
  EXPECT_THAT(result.status(), StatusHas("expert 1 has no slot"));
}

//===----------------------------------------------------------------------===//
// Regroup and Ungroup
//===----------------------------------------------------------------------===//

TEST(Regroup, SourceMajorToSlotMajorAndBack) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    int64_t N = 1 + rng() % 4, S = 1 + rng() % 3, H = 3;
    std::vector<int64_t> counts(N * S);
    int64_t total = 0;
    for (int64_t &c : counts) {
      c = rng() % 3 == 0 ? 0 : rng() % 4; // Many zeros.
      total += c;
    }
    int64_t R = total + rng() % 3; // Rows past the total are padding.
    std::vector<float> received = randomFloats(R * H, trial);
    auto result =
        runStep(OpKind::Regroup, {f32({R, H}, received), i64({N * S}, counts)},
                {{DType::F32, {PlanDim::dynamic(64), H}},
                 {DType::I64, {S + 1}},
                 {DType::I64, {PlanDim::dynamic(64)}}},
                regroupAttrs(N, S));
    ASSERT_TRUE(result.ok()) << result.status();
    // Reference: walk the slots, then the sources, taking each block.
    std::vector<float> grouped;
    std::vector<int64_t> offsets = {0}, perm;
    for (int64_t j = 0; j < S; ++j) {
      for (int64_t s = 0; s < N; ++s) {
        int64_t start = std::accumulate(counts.begin(),
                                        counts.begin() + s * S + j, int64_t{0});
        for (int64_t i = 0; i < counts[s * S + j]; ++i) {
          perm.push_back(start + i);
          grouped.insert(grouped.end(), received.begin() + (start + i) * H,
                         received.begin() + (start + i + 1) * H);
        }
      }
      offsets.push_back(static_cast<int64_t>(perm.size()));
    }
    perm.resize(R, -1);
    grouped.resize(R * H, 0.0f);
    expectNear((*result)[0], {R, H}, grouped, 0);
    EXPECT_EQ((*result)[1].as<int64_t>(), offsets);
    EXPECT_EQ((*result)[2].as<int64_t>(), perm);

    // Ungroup restores the received rows below the total.
    Value back = run1(OpKind::Ungroup, {(*result)[0], (*result)[2]},
                      {DType::F32, {PlanDim::dynamic(64), H}});
    std::vector<float> restored = back.as<float>();
    ASSERT_EQ(restored.size(), received.size());
    for (int64_t i = 0; i < total * H; ++i)
      EXPECT_EQ(restored[i], received[i]) << "trial " << trial << " at " << i;
  }
}

TEST(Regroup, RejectsCountsBeyondTheRows) {
  auto result =
      runStep(OpKind::Regroup, {f32({2, 1}, {1, 2}), i64({2}, {2, 1})},
              {{DType::F32, {2, 1}}, {DType::I64, {2}}, {DType::I64, {2}}},
              regroupAttrs(2, 1));
  EXPECT_THAT(result.status(),
              StatusHas("slot_counts[1] = 1 after 2 rows does not fit"));
}

TEST(Ungroup, RejectsRepeatedRows) {
  auto result =
      runStep(OpKind::Ungroup, {f32({2, 1}, {1, 2}), i64({2}, {1, 1})},
              {{DType::F32, {2, 1}}});
  EXPECT_THAT(result.status(), StatusHas("perm[1] repeats row 1 of perm[0]"));
}

//===----------------------------------------------------------------------===//
// Devices without rows: the dense kernels on a 0-row share of the batch
//===----------------------------------------------------------------------===//

TEST(EmptyShare, DenseKernelsAcceptZeroRows) {
  auto rows = [](int64_t n) { return PlanDim::dynamic(n); };
  Value x = f32({0, 4}, {}), w = f32({4, 3}, randomFloats(12, 1));
  Value scale = f32({4}, {1, 1, 1, 1}), bias = f32({4}, {0, 0, 0, 0});
  fb::NormAttrsT norm;
  fb::TopKAttrsT topk;
  fb::ReduceAttrsT reduce;
  fb::GemmAttrsT gemm;
  fb::TransposeAttrsT transpose;
  transpose.perm = {1, 0};
  struct Case {
    const char *name;
    OpKind op;
    std::vector<std::optional<Value>> inputs;
    std::vector<Out> outputs;
    fb::AttrsUnion attrs;
  } cases[] = {
      {"MatMul", OpKind::MatMul, {x, w}, {{DType::F32, {rows(8), 3}}}, {}},
      {"Gemm", OpKind::Gemm, {x, w}, {{DType::F32, {rows(8), 3}}}, attrs(gemm)},
      {"Add", OpKind::Add, {x, bias}, {{DType::F32, {rows(8), 4}}}, {}},
      {"Softmax",
       OpKind::Softmax,
       {x},
       {{DType::F32, {rows(8), 4}}},
       attrs(fb::AxisAttrsT())},
      {"LayerNormalization",
       OpKind::LayerNormalization,
       {x, scale, bias},
       {{DType::F32, {rows(8), 4}}},
       attrs(norm)},
      {"SimplifiedLayerNormalization",
       OpKind::SimplifiedLayerNormalization,
       {x, scale},
       {{DType::F32, {rows(8), 4}}},
       attrs(norm)},
      {"TopK",
       OpKind::TopK,
       {x, i64({1}, {2})},
       {{DType::F32, {rows(8), 2}}, {DType::I64, {rows(8), 2}}},
       attrs(topk)},
      {"ReduceSum",
       OpKind::ReduceSum,
       {x, i64({1}, {1})},
       {{DType::F32, {rows(8), 1}}},
       attrs(reduce)},
      {"Transpose",
       OpKind::Transpose,
       {x},
       {{DType::F32, {4, rows(8)}}},
       attrs(transpose)},
      {"Gather",
       OpKind::Gather,
       {w, i64({0}, {})},
       {{DType::F32, {rows(8), 3}}},
       attrs(fb::AxisAttrsT())},
  };
  for (Case &c : cases) {
    auto result = runStep(c.op, c.inputs, c.outputs, std::move(c.attrs));
    ASSERT_TRUE(result.ok()) << c.name << ": " << result.status();
    EXPECT_EQ((*result)[0].numel(), 0) << c.name;
  }
}

TEST(EmptyShare, ReshapeOfNoElementsTakesThePlannedSize) {
  // [T, k * H] -> [T, -1, H] with T = 0: any -1 fits, the plan fixes k = 4;
  // a dynamic dim gets 0.
  Value x = f32({0, 64}, {});
  Value spec = i64({3}, {0, -1, 16});
  Value fixed = run1(OpKind::Reshape, {x, spec},
                     {DType::F32, {PlanDim::dynamic(8), 4, 16}},
                     attrs(fb::ReshapeAttrsT()));
  EXPECT_EQ(fixed.shape, (std::vector<int64_t>{0, 4, 16}));
  Value open =
      run1(OpKind::Reshape, {x, spec},
           {DType::F32, {PlanDim::dynamic(8), PlanDim::dynamic(8), 16}},
           attrs(fb::ReshapeAttrsT()));
  EXPECT_EQ(open.shape, (std::vector<int64_t>{0, 0, 16}));
}

//===----------------------------------------------------------------------===//
// The in-process communicator
//===----------------------------------------------------------------------===//

/// Runs `body(comm)` on one thread per device of a fresh group.
template <typename Fn> void onDevices(int devices, double timeout, Fn body) {
  CommOptions options;
  options.timeoutSeconds = timeout;
  auto comms = createInProcessGroup(devices, options);
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d)
    threads.emplace_back([&, d] { body(*comms[d]); });
  for (std::thread &t : threads)
    t.join();
}

class InProcessComm : public ::testing::TestWithParam<int> {};

TEST_P(InProcessComm, ExchangesCountsAndRows) {
  int N = GetParam();
  // Device p sends (p + q) % 3 rows of value 100 p + q to device q, twice,
  // with the second exchange started before the first completes.
  onDevices(N, 10, [&](Communicator &comm) {
    int me = comm.rank();
    std::vector<int64_t> send(N), recv(N);
    for (int q = 0; q < N; ++q)
      send[q] = (me + q) % 3;
    ASSERT_TRUE(comm.exchangeCounts(send.data(), recv.data(), "counts").ok());
    for (int p = 0; p < N; ++p)
      EXPECT_EQ(recv[p], (p + me) % 3);
    std::vector<ExchangeId> ids;
    std::vector<std::vector<float>> sendBuf(2), recvBuf(2);
    for (int round = 0; round < 2; ++round) {
      ExchangeSpec spec;
      size_t at = 0;
      for (int q = 0; q < N; ++q) {
        for (int64_t i = 0; i < send[q]; ++i)
          sendBuf[round].push_back(100 * me + q + 1000 * round);
        spec.sendBytes.push_back(send[q] * 4);
        spec.sendOffsets.push_back(at * 4);
        at += send[q];
      }
      at = 0;
      for (int p = 0; p < N; ++p) {
        spec.recvBytes.push_back(recv[p] * 4);
        spec.recvOffsets.push_back(at * 4);
        at += recv[p];
      }
      recvBuf[round].assign(at, -1);
      spec.send = sendBuf[round].data();
      spec.recv = recvBuf[round].data();
      auto id = comm.start(std::move(spec), "rows");
      ASSERT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    for (int round = 0; round < 2; ++round) {
      ASSERT_TRUE(comm.wait(ids[round]).ok());
      std::vector<float> expected;
      for (int p = 0; p < N; ++p)
        for (int64_t i = 0; i < recv[p]; ++i)
          expected.push_back(100 * p + me + 1000 * round);
      EXPECT_EQ(recvBuf[round], expected);
    }
    std::vector<std::vector<uint8_t>> all;
    ASSERT_TRUE(
        comm.gather(std::vector<uint8_t>(me, uint8_t(me)), all, "gather").ok());
    if (me == 0) {
      ASSERT_EQ(all.size(), size_t(N));
      for (int p = 0; p < N; ++p)
        EXPECT_EQ(all[p], std::vector<uint8_t>(p, uint8_t(p)));
    } else {
      EXPECT_TRUE(all.empty());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Devices, InProcessComm, ::testing::Values(1, 2, 4));

TEST(InProcessComm, TimesOutNamingTheMissingDevice) {
  auto start = std::chrono::steady_clock::now();
  onDevices(3, 0.3, [&](Communicator &comm) {
    if (comm.rank() == 2)
      return; // Never reaches the exchange.
    std::vector<int64_t> send(3, 0), recv(3);
    absl::Status status = comm.exchangeCounts(send.data(), recv.data(),
                                              "step 4 'a2a' (AllToAll)");
    EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
    EXPECT_THAT(status, StatusHas("step 4 'a2a' (AllToAll): device "));
    EXPECT_THAT(status, StatusHas("timed out after 0.3 s waiting for device 2 "
                                  "to reach collective #0"));
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(InProcessComm, AbortWakesTheOtherDevices) {
  auto start = std::chrono::steady_clock::now();
  onDevices(2, 30, [&](Communicator &comm) {
    if (comm.rank() == 1) {
      comm.abort(absl::InternalError("kernel failed"));
      return;
    }
    std::vector<int64_t> send(2, 0), recv(2);
    absl::Status status =
        comm.exchangeCounts(send.data(), recv.data(), "counts");
    EXPECT_THAT(status, StatusHas("device 1 failed: kernel failed"));
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

//===----------------------------------------------------------------------===//
// A MoE layer over N devices
//===----------------------------------------------------------------------===//

constexpr int64_t kH = kLayerHidden, kMaxT = kLayerMaxTokens;

/// The plan bytes of the layer (ep_plans.h); fails the test on error.
std::vector<uint8_t> writeLayer(const Placement *placement,
                                bool overlap = false) {
  auto bytes = writeMoeLayerPlan(placement, overlap);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

/// Runs a layer plan on `tokens` rows of seeded x; returns out and the
/// per-device stats.
absl::StatusOr<HostTensor> runLayer(const std::vector<uint8_t> &bytes,
                                    int64_t tokens,
                                    std::vector<DeviceStats> *stats = nullptr,
                                    double timeout = 10) {
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                         Plan::loadFromMemory(bytes.data(), bytes.size()));
  DeviceGroupOptions options;
  options.threadsPerDevice = 1;
  options.comm.timeoutSeconds = timeout;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceGroup> group,
                         DeviceGroup::create(*plan, options));
  std::vector<float> x = randomFloats(tokens * kH, 11);
  MOERT_RETURN_IF_ERROR(
      group->setInput("x", DType::F32, {tokens, kH}, x.data(), x.size() * 4));
  MOERT_RETURN_IF_ERROR(group->run());
  if (stats) {
    MOERT_ASSIGN_OR_RETURN(*stats, group->deviceStats());
  }
  return group->output("out");
}

/// The layer's stats merged over the devices (moert/stats.h) route the
/// tokens as the 1-device plan does, slot by slot as placed.
void expectSameLayerStats(const Placement &placement,
                          const std::vector<DeviceStats> &reference,
                          const std::vector<DeviceStats> &devices) {
  ASSERT_EQ(reference.size(), 1u);
  ASSERT_EQ(reference[0].moeLayers.size(), 1u);
  const MoeLayerStats &one = reference[0].moeLayers[0];
  std::vector<std::vector<MoeLayerStats>> parts;
  for (size_t d = 0; d < devices.size(); ++d) {
    ASSERT_EQ(devices[d].moeLayers.size(), 1u);
    const MoeLayerStats &part = devices[d].moeLayers[0];
    EXPECT_GE(part.assignSlots, 0);
    EXPECT_GE(part.dispatch, 0);
    EXPECT_GE(part.combine, 0);
    // The device's slots are its range of the placement.
    std::vector<int64_t> slots(
        placement.slotExpert.begin() + placement.slotBegin[d],
        placement.slotExpert.begin() + placement.slotBegin[d + 1]);
    EXPECT_EQ(part.slotExperts, slots) << "device " << d;
    EXPECT_EQ(part.experts >= 0, !slots.empty()) << "device " << d;
    parts.push_back(devices[d].moeLayers);
  }
  absl::StatusOr<std::vector<MoeLayerStats>> merged =
      mergeDeviceLayerStats(parts);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->size(), 1u);
  const MoeLayerStats &all = (*merged)[0];
  EXPECT_EQ(all.tokensPerExpert, one.tokensPerExpert);
  EXPECT_EQ(all.routedPerExpert, one.tokensPerExpert);
  EXPECT_EQ(all.slotExperts, placement.slotExpert);
  ASSERT_EQ(all.deviceRows.size(), devices.size());
  for (size_t d = 0; d < devices.size(); ++d)
    EXPECT_EQ(all.deviceRows[d], devices[d].expertRows);
  EXPECT_EQ(all.runs, 1u);
}

void expectSameAsOneDevice(const Placement &placement, bool overlap) {
  std::vector<uint8_t> reference = writeLayer(nullptr);
  std::vector<uint8_t> split = writeLayer(&placement, overlap);
  int N = static_cast<int>(placement.slotBegin.size()) - 1;
  // One token leaves devices without rows; kMaxT fills the bound.
  for (int64_t tokens : {int64_t{1}, int64_t{5}, kMaxT}) {
    SCOPED_TRACE(absl::StrCat(N, " devices, ", tokens, " tokens"));
    std::vector<DeviceStats> referenceStats;
    auto expected = runLayer(reference, tokens, &referenceStats);
    std::vector<DeviceStats> stats;
    auto actual = runLayer(split, tokens, &stats);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(actual.ok()) << actual.status();
    ASSERT_EQ(actual->shape, (std::vector<int64_t>{tokens, kH}));
    Value got;
    got.dtype = actual->dtype;
    got.shape = actual->shape;
    got.bytes = actual->bytes;
    Value want;
    want.bytes = expected->bytes;
    expectNear(got, {tokens, kH}, want.as<float>(), 1e-5f);
    // Every assignment reached exactly one expert; the rows a device sent
    // to others are the rows the others received from it.
    uint64_t expertRows = 0, sent = 0, received = 0;
    ASSERT_EQ(stats.size(), size_t(N));
    for (const DeviceStats &s : stats) {
      expertRows += s.expertRows;
      sent += s.comm.rowsSent;
      received += s.comm.rowsReceived;
    }
    EXPECT_EQ(expertRows, uint64_t(tokens * kLayerTopK));
    EXPECT_EQ(sent, received);
    expectSameLayerStats(placement, referenceStats, stats);
  }
}

TEST(ExpertParallel, TwoDevicesMatchOneDevice) {
  expectSameAsOneDevice({{0, 2, 4}, {0, 1, 2, 3}}, /*overlap=*/false);
}

TEST(ExpertParallel, FourDevicesMatchOneDevice) {
  expectSameAsOneDevice({{0, 1, 2, 3, 4}, {0, 1, 2, 3}}, /*overlap=*/false);
}

TEST(ExpertParallel, ReplicasAndOverlapMatchOneDevice) {
  // Expert 0 has a replica on device 1; device 0 holds one slot only.
  expectSameAsOneDevice({{0, 1, 5}, {0, 1, 2, 3, 0}}, /*overlap=*/true);
}

TEST(ExpertParallel, LayerStatsSurviveTheGatherOrFailCleanly) {
  MoeLayerStats layer;
  layer.name = "moe/0";
  layer.router = 3;
  layer.assignSlots = 4;
  layer.steps = {3, 4, 5};
  layer.runs = 2;
  layer.tokensPerExpert = {1, 0, 7};
  layer.slotExperts = {2, 0};
  layer.tokensPerSlot = {7, 1};
  layer.commSeconds = 0.25;
  std::vector<uint8_t> bytes = serializeLayerStats({layer, layer});
  auto back = deserializeLayerStats(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].name, "moe/0");
  EXPECT_EQ((*back)[1].router, 3);
  EXPECT_EQ((*back)[1].experts, -1);
  EXPECT_EQ((*back)[1].steps, layer.steps);
  EXPECT_EQ((*back)[1].tokensPerExpert, layer.tokensPerExpert);
  EXPECT_EQ((*back)[1].slotExperts, layer.slotExperts);
  EXPECT_EQ((*back)[1].commSeconds, 0.25);
  // Every truncation, and trailing bytes, are errors.
  for (size_t size = 0; size < bytes.size(); ++size)
    EXPECT_THAT(deserializeLayerStats(bytes.data(), size).status(),
                StatusHas("gathered MoE layer stats are malformed"));
  bytes.push_back(0);
  EXPECT_FALSE(deserializeLayerStats(bytes.data(), bytes.size()).ok());
  // Devices must agree on the layers and experts.
  MoeLayerStats fewer = layer;
  fewer.tokensPerExpert = {1, 0};
  EXPECT_THAT(mergeDeviceLayerStats({{layer}, {fewer}}).status(),
              StatusHas("MoE layer 0 has 2 experts on device 1"));
  EXPECT_THAT(mergeDeviceLayerStats({{layer}, {}}).status(),
              StatusHas("device 1 has 0 MoE layers"));
}

TEST(ExpertParallel, InjectedExitTimesOutTheOthers) {
  Placement placement{{0, 2, 4}, {0, 1, 2, 3}};
  std::vector<uint8_t> plan = writeLayer(&placement);
  // Device 1 stops before its first exchange (step 10, the count exchange).
  ::setenv("MOERT_FAULT_INJECT", "1:10:exit", 1);
  auto start = std::chrono::steady_clock::now();
  auto result = runLayer(plan, 4, nullptr, /*timeout=*/0.5);
  ::unsetenv("MOERT_FAULT_INJECT");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_THAT(result.status(), StatusHas("device 1 exited before step 10"));
  EXPECT_THAT(result.status(),
              StatusHas("step 10 'a2a_counts' (AllToAll): device 0 "
                        "(in-process) timed out after 0.5 s waiting for "
                        "device 1"));
}

TEST(ExpertParallel, LoaderChecksCollectiveSteps) {
  Placement placement{{0, 2, 4}, {0, 1, 2, 3}};
  std::vector<uint8_t> bytes = writeLayer(&placement);
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Without a communicator, a session refuses the plan up front.
  auto session = Session::create(**plan, {});
  EXPECT_THAT(session.status(), StatusHas("needs a communicator"));
}

/// A 2-device plan whose schedules are `body` applied to each builder.
template <typename Fn> absl::Status loadTwoDevicePlan(Fn body) {
  PlanWriter writer({Backend::Cpu, 2, 0});
  for (int d = 0; d < 2; ++d) {
    ScheduleBuilder &s = writer.schedule(d);
    int32_t data = s.addTensor("data", DType::F32, {4, 2});
    int32_t send = s.addTensor("send", DType::I64, {2});
    s.addInput(data);
    s.addInput(send);
    body(s, data, send);
  }
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.serialize());
  return Plan::loadFromMemory(bytes.data(), bytes.size()).status();
}

TEST(ExpertParallel, LoaderRejectsUnpairedOrMisusedExchanges) {
  auto start = [](ScheduleBuilder &s, int32_t data, int32_t send,
                  int64_t devices = 2) {
    int32_t recv = s.addTensor("recv", DType::F32, {PlanDim::dynamic(8), 2});
    int32_t counts = s.addTensor("counts", DType::I64, {2});
    s.addStep(OpKind::AllToAllStart, "start", {data, send}, {recv, counts},
              collectiveAttrs(devices));
    return std::make_pair(recv, counts);
  };
  EXPECT_THAT(loadTwoDevicePlan([&](ScheduleBuilder &s, int32_t data,
                                    int32_t send) { start(s, data, send); }),
              StatusHas("step 0 'start' (AllToAllStart): no AllToAllWait "
                        "completes the exchange"));
  EXPECT_THAT(
      loadTwoDevicePlan([&](ScheduleBuilder &s, int32_t data, int32_t send) {
        auto [recv, counts] = start(s, data, send);
        int32_t copy =
            s.addTensor("copy", DType::F32, {PlanDim::dynamic(8), 2});
        s.addStep(OpKind::Neg, "early", {recv}, {copy});
        s.addStep(OpKind::AllToAllWait, "wait", {data, send, recv, counts}, {});
      }),
      StatusHas("step 1 'early' (Neg): reads 'recv' before the AllToAllWait"));
  EXPECT_THAT(
      loadTwoDevicePlan([&](ScheduleBuilder &s, int32_t data, int32_t send) {
        auto [recv, counts] = start(s, data, send);
        s.addStep(OpKind::AllToAllWait, "wait", {send, data, recv, counts}, {});
      }),
      StatusHas("must name the inputs then the outputs of step 0"));
  EXPECT_THAT(
      loadTwoDevicePlan([&](ScheduleBuilder &s, int32_t data, int32_t send) {
        s.addStep(OpKind::AllToAllWait, "wait", {data, send, data, send}, {});
      }),
      StatusHas("which no earlier AllToAllStart is receiving"));
  EXPECT_THAT(
      loadTwoDevicePlan([&](ScheduleBuilder &s, int32_t data, int32_t send) {
        auto [recv, counts] = start(s, data, send, 3);
        s.addStep(OpKind::AllToAllWait, "wait", {data, send, recv, counts}, {});
      }),
      StatusHas("exchanges with 3 devices but the plan has 2"));
}

/// A 2-device plan where device d negates its own weight shard w (in its
/// own section) and device 1 also reads device 0's shared weight `dense`.
struct ShardedPlan {
  PlanWriter writer{{Backend::Cpu, 2, 0}};
  std::vector<float> shard[2] = {std::vector<float>(64, 1.5f),
                                 std::vector<float>(64, 12345.0f)};
  std::vector<float> dense = std::vector<float>(64, 2.0f);
  int32_t shared = -1;

  ShardedPlan() {
    int32_t owner = -1;
    for (int d = 0; d < 2; ++d) {
      ScheduleBuilder &s = writer.schedule(d);
      int section = writer.addWeightSection();
      int32_t w =
          s.addWeight("w", DType::F32, {64}, shard[d].data(), 256, section);
      int32_t y = s.addTensor("y", DType::F32, {64});
      s.addStep(OpKind::Neg, "neg", {w}, {y});
      s.addOutput(y);
      if (d == 0) {
        owner = s.addWeight("dense", DType::F32, {64}, dense.data(), 256);
        // Room after it in the section for a misplaced reference.
        s.addWeight("bias", DType::F32, {64}, dense.data(), 256);
      } else {
        shared = s.addSharedWeight("dense", 0, owner);
      }
    }
  }
};

TEST(ExpertParallel, EachDeviceChecksOnlyItsWeightShards) {
  ShardedPlan p;
  auto bytes = p.writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // Corrupt device 1's shard: its first value's bytes.
  float marker = 12345.0f;
  auto at = std::search(bytes->begin(), bytes->end(),
                        reinterpret_cast<const uint8_t *>(&marker),
                        reinterpret_cast<const uint8_t *>(&marker) + 4);
  ASSERT_NE(at, bytes->end());
  *at ^= 1;
  auto load = [&](int device) {
    LoadOptions options;
    options.device = device;
    return Plan::loadFromMemory(bytes->data(), bytes->size(), options).status();
  };
  EXPECT_TRUE(load(0).ok()) << load(0);
  EXPECT_THAT(load(1), StatusHas("weights checksum mismatch"));
  EXPECT_THAT(load(-1), StatusHas("weights checksum mismatch"));
  EXPECT_THAT(load(2), StatusHas("device 2 is requested but the plan has 2 "
                                 "device schedules"));
}

TEST(ExpertParallel, SharedWeightsNameTheSameBytes) {
  ShardedPlan good;
  auto bytes = good.writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(Plan::loadFromMemory(bytes->data(), bytes->size()).ok());

  ShardedPlan bad;
  bad.writer.schedule(1).tensor(bad.shared).offset += 64;
  auto badBytes = bad.writer.serialize();
  ASSERT_TRUE(badBytes.ok()) << badBytes.status();
  EXPECT_THAT(Plan::loadFromMemory(badBytes->data(), badBytes->size()).status(),
              StatusHas("partly overlap"));
}

/// Two devices, no exchange: x [B, S] and w [B] (both split over the batch
/// B), out = Concat(x, Unsqueeze(w, 1), axis 1) [B, S + 1].
absl::StatusOr<std::vector<uint8_t>> batchInputsPlan() {
  PlanWriter writer({Backend::Cpu, 2, 0});
  int b = writer.addSymbol("B", 1, 4);
  int seq = writer.addSymbol("S", 1, 4);
  std::vector<int64_t> one = {1};
  for (int d = 0; d < 2; ++d) {
    ScheduleBuilder &s = writer.schedule(d);
    int32_t x = s.addTensor("x", DType::F32,
                            {PlanDim::symbol(b), PlanDim::symbol(seq)});
    int32_t w = s.addTensor("w", DType::F32, {PlanDim::symbol(b)});
    s.addInput(x);
    s.addInput(w);
    int32_t axes = s.addWeight("axes", DType::I64, {1}, one.data(), 8);
    int32_t wu = s.addTensor("wu", DType::F32, {PlanDim::symbol(b), 1});
    s.addStep(OpKind::Unsqueeze, "wu", {w, axes}, {wu});
    int32_t out = s.addTensor("out", DType::F32,
                              {PlanDim::symbol(b), PlanDim::dynamic(5)});
    fb::AxisAttrsT axis1;
    axis1.axis = 1;
    s.addStep(OpKind::Concat, "out", {x, wu}, {out}, attrs(axis1));
    s.addOutput(out);
  }
  return writer.serialize();
}

TEST(ExpertParallel, EveryInputOfAPaddedBatchIsPadded) {
  // With B = 1, device 1's share of the batch is empty: it runs a padding
  // row of x and of w alike (a 1-D [B] input is split over the batch too),
  // whichever input is set first, and its output is left out.
  auto bytes = batchInputsPlan();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  DeviceGroupOptions options;
  options.threadsPerDevice = 1;
  for (bool xFirst : {true, false})
    for (int64_t B : {int64_t{1}, int64_t{3}}) {
      SCOPED_TRACE(::testing::Message() << "B " << B << " x first " << xFirst);
      auto group = DeviceGroup::create(**plan, options);
      ASSERT_TRUE(group.ok()) << group.status();
      int64_t S = 2;
      std::vector<float> x = randomFloats(B * S, 5 + B);
      std::vector<float> w = randomFloats(B, 9 + B);
      auto setX = [&] {
        return (*group)->setInput("x", DType::F32, {B, S}, x.data(),
                                  x.size() * 4);
      };
      auto setW = [&] {
        return (*group)->setInput("w", DType::F32, {B}, w.data(), w.size() * 4);
      };
      ASSERT_TRUE((xFirst ? setX() : setW()).ok());
      ASSERT_TRUE((xFirst ? setW() : setX()).ok());
      absl::Status ran = (*group)->run();
      ASSERT_TRUE(ran.ok()) << ran;
      EXPECT_EQ((*group)->paddingRows(), B == 1 ? 1 : 0);
      auto out = (*group)->output("out");
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->shape, (std::vector<int64_t>{B, S + 1}));
      const float *o = reinterpret_cast<const float *>(out->bytes.data());
      for (int64_t r = 0; r < B; ++r) {
        for (int64_t c = 0; c < S; ++c)
          EXPECT_EQ(o[r * (S + 1) + c], x[r * S + c]) << r << ", " << c;
        EXPECT_EQ(o[r * (S + 1) + S], w[r]) << r;
      }
    }
}

/// Two devices, no exchange: x [T] and out = x with dim 0 dynamic; with
/// `replicated`, x is a replicated input (the dense part runs whole on every
/// device, docs/expert-parallelism.md).
absl::StatusOr<std::vector<uint8_t>> replicatedInputPlan(bool replicated) {
  PlanWriter writer({Backend::Cpu, 2, 0});
  int t = writer.addSymbol("T", 1, 8);
  for (int d = 0; d < 2; ++d) {
    ScheduleBuilder &s = writer.schedule(d);
    int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(t)});
    s.tensor(x).replicated = replicated;
    s.addInput(x);
    int32_t out = s.addTensor("out", DType::F32, {PlanDim::dynamic(8)});
    s.addStep(OpKind::Identity, "out", {x}, {out});
    s.addOutput(out);
  }
  return writer.serialize();
}

TEST(ExpertParallel, ReplicatedInputsAreNotSplit) {
  // A replicated input reaches every device whole; otherwise device 0 gets
  // the first half of the rows.
  for (bool replicated : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "replicated " << replicated);
    auto bytes = replicatedInputPlan(replicated);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ((*plan)->inputs(0)[0].replicated, replicated);
    EXPECT_EQ(splitsAcrossDevices((*plan)->inputs(1)[0]), !replicated);
    DeviceGroupOptions options;
    options.threadsPerDevice = 1;
    auto group = DeviceGroup::create(**plan, options);
    ASSERT_TRUE(group.ok()) << group.status();
    std::vector<float> x = randomFloats(6, 3);
    ASSERT_TRUE((*group)->setInput("x", DType::F32, {6}, x.data(), 24).ok());
    absl::Status ran = (*group)->run();
    ASSERT_TRUE(ran.ok()) << ran;
    auto out = (*group)->output("out");
    ASSERT_TRUE(out.ok()) << out.status();
    int64_t rows = replicated ? 6 : 3;
    ASSERT_EQ(out->shape, std::vector<int64_t>{rows});
    const float *o = reinterpret_cast<const float *>(out->bytes.data());
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(o[r], x[r]) << r;
  }
}

} // namespace
} // namespace moert::testing
