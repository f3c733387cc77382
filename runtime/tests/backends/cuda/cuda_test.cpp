//===- cuda_test.cpp - CUDA backend: host-side logic, no-GPU behaviour ----===//
//
// What of the CUDA backend can be checked without a GPU: the launch planning
// of generated fused kernels, grid sizes, and that sessions fail with one
// clear error where no device (or no CUDA build) exists. The GPU-side
// checks are bench/gpu_check.sh's.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/launch.h"
#include "format/plan_writer.h"
#include "moert/cuda.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace moert::cuda {
namespace {

using detail::Shape;
using ::testing::HasSubstr;

absl::Status plan(const Shape &out, std::vector<Shape> inputs,
                  FusedArgs &args) {
  std::vector<const Shape *> pointers;
  for (const Shape &shape : inputs)
    pointers.push_back(&shape);
  return planFusedArgs(out, pointers.data(), static_cast<int>(inputs.size()),
                       args);
}

/// Expects the loop nest `shape` and each operand's `strides` along it.
void expectLayout(const FusedArgs &args, std::vector<int64_t> shape,
                  std::vector<std::vector<int64_t>> strides) {
  ASSERT_EQ(args.rank, static_cast<int>(shape.size()));
  ASSERT_EQ(args.num_inputs, static_cast<int>(strides.size()));
  for (size_t d = 0; d < shape.size(); ++d)
    EXPECT_EQ(args.shape[d], shape[d]) << "dim " << d;
  for (size_t i = 0; i < strides.size(); ++i)
    for (size_t d = 0; d < shape.size(); ++d)
      EXPECT_EQ(args.strides[i][d], strides[i][d])
          << "operand " << i << ", dim " << d;
}

TEST(CudaLaunch, SameShapeOperandsCollapseToOneDim) {
  FusedArgs args;
  ASSERT_TRUE(plan({4, 3, 5}, {{4, 3, 5}, {4, 3, 5}}, args).ok());
  EXPECT_EQ(args.numel, 60);
  expectLayout(args, {60}, {{1}, {1}});
}

TEST(CudaLaunch, RowBroadcastKeepsTwoDims) {
  // x [T, H] * w [H]: w is re-read for every row.
  FusedArgs args;
  ASSERT_TRUE(plan({7, 16}, {{7, 16}, {16}}, args).ok());
  expectLayout(args, {7, 16}, {{16, 1}, {0, 1}});
}

TEST(CudaLaunch, ColumnBroadcastAndUnitDims) {
  // x [T, 1, H] * s [T, 1, 1]: the unit dim disappears, s is per row.
  FusedArgs args;
  ASSERT_TRUE(plan({5, 1, 8}, {{5, 1, 8}, {5, 1, 1}}, args).ok());
  expectLayout(args, {5, 8}, {{8, 1}, {1, 0}});
}

TEST(CudaLaunch, OuterBroadcastMergesWithContiguousInner) {
  // a [2, 3, 4] + b [3, 4]: b's two dims merge, and so do a's.
  FusedArgs args;
  ASSERT_TRUE(plan({2, 3, 4}, {{2, 3, 4}, {3, 4}}, args).ok());
  expectLayout(args, {2, 12}, {{12, 1}, {0, 1}});
}

TEST(CudaLaunch, ScalarsAndEmptyTensors) {
  FusedArgs args;
  ASSERT_TRUE(plan({}, {{}, {}}, args).ok());
  EXPECT_EQ(args.numel, 1);
  EXPECT_EQ(args.rank, 0);
  ASSERT_TRUE(plan({0, 4}, {{0, 4}, {4}}, args).ok());
  EXPECT_EQ(args.numel, 0);
}

/// Every output element's input offsets, computed the way the generated
/// kernel does, match numpy broadcasting on a rank-4 case.
TEST(CudaLaunch, OffsetsMatchBroadcastSemantics) {
  Shape out{2, 3, 4, 5};
  Shape a{2, 1, 4, 1}, b{3, 1, 5}, c{2, 3, 4, 5};
  FusedArgs args;
  ASSERT_TRUE(plan(out, {a, b, c}, args).ok());
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t rest = i, off[3] = {0, 0, 0};
    for (int d = args.rank - 1; d >= 0; --d) {
      int64_t coord = rest % args.shape[d];
      rest /= args.shape[d];
      for (int k = 0; k < 3; ++k)
        off[k] += coord * args.strides[k][d];
    }
    int64_t i3 = i % 5, i2 = i / 5 % 4, i1 = i / 20 % 3, i0 = i / 60;
    EXPECT_EQ(off[0], i0 * 4 + i2) << i;
    EXPECT_EQ(off[1], i1 * 5 + i3) << i;
    EXPECT_EQ(off[2], i) << i;
  }
}

TEST(CudaLaunch, RejectsWhatTheAbiCannotCarry) {
  FusedArgs args;
  absl::Status status = plan({4, 3}, {{4, 2}}, args);
  EXPECT_THAT(std::string(status.message()), HasSubstr("does not broadcast"));
  EXPECT_FALSE(plan({4}, {{2, 4}}, args).ok());
  EXPECT_FALSE(plan({4}, {}, args).ok());
  std::vector<Shape> many(kFusedMaxOperands + 1, Shape{4});
  EXPECT_FALSE(plan({4}, many, args).ok());
}

TEST(CudaLaunch, GridSize) {
  EXPECT_EQ(gridSize(0, 256, 132), 1u);
  EXPECT_EQ(gridSize(1, 256, 132), 1u);
  EXPECT_EQ(gridSize(257, 256, 132), 2u);
  // Large tensors are covered by a grid-stride loop of bounded waves.
  EXPECT_EQ(gridSize(int64_t(1) << 40, 256, 132), 132u * 8);
  // An unknown SM count (0) counts as one multiprocessor.
  EXPECT_EQ(gridSize(1000, 256, 0), 4u);
  EXPECT_EQ(gridSize(1 << 20, 256, 0), 8u);
}

/// Without a GPU (this CI), the backend fails with one clear error instead
/// of crashing; with one, the device count is positive.
TEST(CudaBackend, NoDeviceIsAClearError) {
  absl::StatusOr<int> count = cudaDeviceCount();
  if (count.ok()) {
    EXPECT_GT(*count, 0);
    GTEST_SKIP() << "a CUDA device is present";
  }
  EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(count.status().message()),
              HasSubstr("no CUDA device: "));
  if (!cudaBackendBuilt()) {
    EXPECT_THAT(std::string(count.status().message()),
                HasSubstr("MOERT_CUDA=OFF"));
  }

  PlanWriter writer({Backend::Cpu, 1});
  ScheduleBuilder &s = writer.schedule(0);
  int32_t x = s.addTensor("x", DType::F32, {4});
  int32_t y = s.addTensor("y", DType::F32, {4});
  s.addInput(x);
  s.addStep(fb::OpKind::Relu, "relu", {x}, {y});
  s.addOutput(y);
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<Plan>> loaded =
      Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::unique_ptr<CudaSession>> session =
      CudaSession::create(**loaded);
  ASSERT_FALSE(session.ok());
  // A cpu plan is refused before the device is looked for.
  EXPECT_THAT(std::string(session.status().message()),
              cudaBackendBuilt() ? HasSubstr("compile it with 'moec compile "
                                             "--target cuda'")
                                 : HasSubstr("MOERT_CUDA=OFF"));
}

} // namespace
} // namespace moert::cuda
