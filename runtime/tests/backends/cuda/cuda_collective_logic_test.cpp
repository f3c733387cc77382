//===- cuda_collective_logic_test.cpp - Collective kernels' logic on the CPU
//===//
//
// Runs the per-thread logic of collective_kernels.cu (collective_logic.h) on
// the host, thread index by thread index as the kernels map it, and compares
// the results with the CPU kernels (runtime/src/kernels/collective.cpp, run
// through one-step plans): AssignSlots with replicas, Regroup's layout and
// perm (random counts with empty slots and padding rows), and Ungroup's
// scatter with its claims, plus the data errors each records.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/collective_logic.h"
#include "ep_plans.h"
#include "test_util.h"

#include <map>
#include <random>

namespace moert::testing {
namespace {

using cuda::assignSlot;
using cuda::regroupLayout;
using cuda::regroupSource;
using cuda::ungroupCheck;
using fb::OpKind;

TEST(CudaCollectiveLogic, AssignSlotsMatchesTheCpuKernel) {
  // Expert 0 has slots {0, 4}, expert 1 {1}, expert 2 {2, 3, 5}.
  std::vector<int64_t> offsets = {0, 2, 3, 6}, slots = {0, 4, 1, 2, 3, 5};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 10; ++trial) {
    int64_t T = 1 + rng() % 9, k = 1 + rng() % 3;
    std::vector<int64_t> idx(T * k);
    for (int64_t &e : idx)
      e = static_cast<int64_t>(rng() % 4) - 1;
    auto cpu = runStep(OpKind::AssignSlots, {i64({T, k}, idx)},
                       {{DType::I64, {T, k}}}, slotAttrs(offsets, slots));
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    // One thread per assignment i, token i / k.
    std::vector<int64_t> gpu(T * k);
    for (int64_t i = 0; i < T * k; ++i)
      ASSERT_TRUE(
          assignSlot(idx[i], i / k, offsets.data(), slots.data(), 3, &gpu[i]));
    EXPECT_EQ(gpu, (*cpu)[0].as<int64_t>()) << "trial " << trial;
  }
}

TEST(CudaCollectiveLogic, AssignSlotsRejectsWhatTheCpuRejects) {
  std::vector<int64_t> offsets = {0, 1, 2}, slots = {0, 1};
  int64_t slot = 0;
  for (int64_t e : {-2, 2, 100}) {
    EXPECT_FALSE(assignSlot(e, 0, offsets.data(), slots.data(), 2, &slot));
    auto cpu = runStep(OpKind::AssignSlots, {i64({1, 1}, {e})},
                       {{DType::I64, {1, 1}}}, slotAttrs(offsets, slots));
    EXPECT_FALSE(cpu.ok()) << e;
  }
  EXPECT_TRUE(assignSlot(-1, 0, offsets.data(), slots.data(), 2, &slot));
  EXPECT_EQ(slot, -1);
}

/// Regroup and Ungroup as the GPU runs them, on the host.
struct GpuRegroup {
  std::vector<float> grouped;
  std::vector<int64_t> offsets, perm;
  int64_t badCount = -1;
};

GpuRegroup regroupOnHost(const std::vector<float> &received,
                         const std::vector<int64_t> &counts, int64_t N,
                         int64_t S, int64_t R, int64_t H) {
  GpuRegroup out;
  std::vector<int64_t> start(N * S);
  out.offsets.assign(S + 1, -7); // The layout must write every entry.
  out.badCount =
      regroupLayout(counts.data(), N, S, R, start.data(), out.offsets.data());
  out.perm.resize(R);
  for (int64_t r = 0; r < R; ++r) // regroupPermKernel: a thread per row.
    out.perm[r] =
        regroupSource(r, counts.data(), start.data(), out.offsets.data(), N, S);
  out.grouped.resize(R * H); // gatherRowsKernel: a thread per word.
  for (int64_t i = 0; i < R * H; ++i) {
    int64_t p = out.perm[i / H];
    out.grouped[i] = p >= 0 ? received[p * H + i % H] : 0.0f;
  }
  return out;
}

/// Ungroup's claim and row kernels on the host; `error` is the first
/// recorded code (0 when none).
std::vector<float> ungroupOnHost(const std::vector<float> &grouped,
                                 const std::vector<int64_t> &perm, int64_t R,
                                 int64_t H, int &error) {
  error = 0;
  std::vector<int64_t> claim(R, -1);
  for (int64_t r = 0; r < R; ++r) {
    int64_t p = perm[r];
    if (int code = ungroupCheck(p, R)) {
      error = error ? error : code;
      continue;
    }
    if (p < 0)
      continue;
    if (claim[p] != -1)
      error = error ? error : cuda::kUngroupPermRepeats;
    else
      claim[p] = r;
  }
  std::vector<float> out(R * H);
  for (int64_t i = 0; i < R * H; ++i) {
    int64_t r = claim[i / H];
    out[i] = r >= 0 ? grouped[r * H + i % H] : 0.0f;
  }
  return out;
}

TEST(CudaCollectiveLogic, RegroupAndUngroupMatchTheCpuKernels) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    int64_t N = 1 + rng() % 4, S = 1 + rng() % 4, H = 1 + rng() % 3;
    std::vector<int64_t> counts(N * S);
    int64_t total = 0;
    for (int64_t &c : counts) {
      c = rng() % 3 == 0 ? 0 : rng() % 4; // Many empty blocks.
      total += c;
    }
    int64_t R = total + rng() % 3; // Rows past the total are padding.
    std::vector<float> received = randomFloats(R * H, trial);
    auto cpu =
        runStep(OpKind::Regroup, {f32({R, H}, received), i64({N * S}, counts)},
                {{DType::F32, {PlanDim::dynamic(64), H}},
                 {DType::I64, {S + 1}},
                 {DType::I64, {PlanDim::dynamic(64)}}},
                regroupAttrs(N, S));
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    GpuRegroup gpu = regroupOnHost(received, counts, N, S, R, H);
    EXPECT_EQ(gpu.badCount, -1);
    EXPECT_EQ(gpu.grouped, (*cpu)[0].as<float>()) << "trial " << trial;
    EXPECT_EQ(gpu.offsets, (*cpu)[1].as<int64_t>()) << "trial " << trial;
    EXPECT_EQ(gpu.perm, (*cpu)[2].as<int64_t>()) << "trial " << trial;

    auto back = runStep(OpKind::Ungroup, {(*cpu)[0], (*cpu)[2]},
                        {{DType::F32, {PlanDim::dynamic(64), H}}});
    ASSERT_TRUE(back.ok()) << back.status();
    int error = 0;
    std::vector<float> restored =
        ungroupOnHost(gpu.grouped, gpu.perm, R, H, error);
    EXPECT_EQ(error, 0);
    EXPECT_EQ(restored, (*back)[0].as<float>()) << "trial " << trial;
  }
}

TEST(CudaCollectiveLogic, RegroupRejectsCountsTheCpuRejects) {
  // As the CPU: slot_counts[1] = 1 after 2 rows overruns 2 rows.
  std::vector<int64_t> counts = {2, 1}, start(2), offsets(2, -7);
  EXPECT_EQ(regroupLayout(counts.data(), 2, 1, 2, start.data(), offsets.data()),
            1);
  // Every grouped row is then empty.
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(regroupSource(0, counts.data(), start.data(), offsets.data(), 2, 1),
            -1);
  counts = {-1, 0};
  EXPECT_EQ(regroupLayout(counts.data(), 2, 1, 5, start.data(), offsets.data()),
            0);
  auto cpu =
      runStep(OpKind::Regroup, {f32({2, 1}, {1, 2}), i64({2}, {2, 1})},
              {{DType::F32, {2, 1}}, {DType::I64, {2}}, {DType::I64, {2}}},
              regroupAttrs(2, 1));
  EXPECT_FALSE(cpu.ok());
}

TEST(CudaCollectiveLogic, UngroupRejectsWhatTheCpuRejects) {
  int error = 0;
  ungroupOnHost({1, 2}, {1, 1}, 2, 1, error);
  EXPECT_EQ(error, cuda::kUngroupPermRepeats);
  EXPECT_FALSE(runStep(OpKind::Ungroup, {f32({2, 1}, {1, 2}), i64({2}, {1, 1})},
                       {{DType::F32, {2, 1}}})
                   .ok());
  ungroupOnHost({1, 2}, {0, 2}, 2, 1, error);
  EXPECT_EQ(error, cuda::kUngroupPermOutOfRange);
  EXPECT_FALSE(runStep(OpKind::Ungroup, {f32({2, 1}, {1, 2}), i64({2}, {0, 2})},
                       {{DType::F32, {2, 1}}})
                   .ok());
  EXPECT_EQ(ungroupCheck(-1, 2), 0);
  EXPECT_EQ(ungroupCheck(-2, 2), cuda::kUngroupPermOutOfRange);
}

} // namespace
} // namespace moert::testing
