//===- linear_test.cpp - The Linear step ----------------------------------===//
//
// Dense matrices narrowed by `moec compile --weight-dtype` (format 1.16), or
// kept f32: the plan writer stores a MatMul's [K, N] f32 weight transposed,
// as [N, K] f32, bf16, f16 or int8 with a scale per output channel, and the
// Linear step multiplies by it. Each weight type's streamed (few rows) and GEMM
// (more rows: oneDNN's f32 matmul on widened blocks, or sgemm) paths against
// the f64 product of the stored weights, within f32 accumulation; the load-time
// checks.
//
//===----------------------------------------------------------------------===//

#include "format/float16.h"
#include "format/plan_writer.h"
#include "kernels/expert_gemm.h"
#include "kernels/tiles.h"
#include "plan_bytes.h"
#include "test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace moert::testing {
namespace {

/// A [K, N] f32 matrix as a MatMul's weight, and the values the plan stores
/// for it as `dtype`, [N, K] (transposed; int8 dequantized with its scales).
struct Matrix {
  int64_t K, N;
  DType dtype;
  std::vector<float> kn;
  std::vector<double> stored;

  Matrix(int64_t K, int64_t N, DType dtype, uint32_t seed)
      : K(K), N(N), dtype(dtype), kn(randomFloats(K * N, seed)), stored(N * K) {
    // One column of zeros: an all-zero channel gets scale 0.
    for (int64_t k = 0; k < K; ++k)
      kn[k * N + N / 2] = 0;
    for (int64_t n = 0; n < N; ++n) {
      float maxAbs = 0;
      for (int64_t k = 0; k < K; ++k)
        maxAbs = std::max(maxAbs, std::fabs(kn[k * N + n]));
      float scale = maxAbs / 127.0f;
      for (int64_t k = 0; k < K; ++k) {
        float w = kn[k * N + n];
        double v = w;
        if (dtype == DType::BF16)
          v = detail::bfloatToFloat(detail::floatToBfloat(w));
        else if (dtype == DType::F16)
          v = detail::halfToFloat(detail::floatToHalf(w));
        else if (dtype == DType::I8)
          v = scale == 0 ? 0.0
                         : double(std::clamp(std::nearbyint(w / scale), -127.0f,
                                             127.0f)) *
                               scale;
        stored[n * K + k] = v;
      }
    }
  }
};

/// A plan of one Linear step y [1, rows, N] = a [1, rows, K] W^T with `m`
/// written as the compiler writes it.
absl::StatusOr<std::vector<uint8_t>> linearPlan(const Matrix &m, int64_t rows) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t a =
      s.addTensor("a", DType::F32, {PlanDim(1), PlanDim(rows), PlanDim(m.K)});
  s.addInput(a);
  std::vector<WeightPiece> pieces = {
      {m.kn.data(), m.kn.size() * sizeof(float)}};
  std::vector<int32_t> inputs = {a};
  if (m.dtype == DType::I8) {
    int32_t scales = -1;
    inputs.push_back(s.addQuantizedWeightPieces("w", {m.K, m.N}, pieces,
                                                /*channelDim=*/2, scales));
    inputs.push_back(scales);
  } else if (m.dtype == DType::F32) {
    inputs.push_back(s.addWeightPieces("w", DType::F32, {m.K, m.N}, pieces));
  } else {
    inputs.push_back(
        s.addNarrowedWeightPieces("w", m.dtype, {m.K, m.N}, pieces));
  }
  s.transposeExpertMatrices(inputs[1]);
  int32_t y =
      s.addTensor("y", DType::F32, {PlanDim(1), PlanDim(rows), PlanDim(m.N)});
  s.addOutput(y);
  s.addStep(fb::OpKind::Linear, "linear", inputs, {y});
  return writer.serialize();
}

absl::StatusOr<std::vector<float>> runLinear(const Matrix &m,
                                             const std::vector<float> &a,
                                             int64_t rows, int threads) {
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, linearPlan(m, rows));
  std::unique_ptr<Plan> plan;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                         openSession(bytes, threads, plan));
  MOERT_RETURN_IF_ERROR(session->setInput("a", DType::F32, {1, rows, m.K},
                                          a.data(), a.size() * 4));
  MOERT_RETURN_IF_ERROR(session->run());
  MOERT_ASSIGN_OR_RETURN(Value y, outputValue(*session, "y"));
  return y.as<float>();
}

/// Expects `y` to be the f64 product of `a` and the stored weights, within
/// `tolerance` of the sum of the terms' magnitudes (f32 accumulation: 1e-5).
void expectProduct(const Matrix &m, const std::vector<float> &a, int64_t rows,
                   const std::vector<float> &y, double tolerance) {
  ASSERT_EQ(y.size(), static_cast<size_t>(rows * m.N));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t n = 0; n < m.N; ++n) {
      double want = 0, magnitude = 0;
      for (int64_t k = 0; k < m.K; ++k) {
        double term = a[i * m.K + k] * m.stored[n * m.K + k];
        want += term;
        magnitude += std::fabs(term);
      }
      ASSERT_NEAR(y[i * m.N + n], want, tolerance * (1 + magnitude))
          << "row " << i << " column " << n;
    }
}

/// Runs every weight type over 1 to 8 rows (streamed up to streamedRows: 4
/// to 8 where the CPU has AVX-512, else 16) and 20 and 70 rows, K and N not
/// multiples of 16 lanes (K = 1000: from 7 rows the streamed product goes
/// through blocks of weight rows), 1 and 3 threads.
void checkEveryWeightType() {
  uint32_t seed = 700;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::I8})
    for (auto [K, N] :
         {std::pair<int64_t, int64_t>{37, 300}, {256, 48}, {1000, 40}})
      for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 20, 70})
        for (int threads : {1, 3}) {
          SCOPED_TRACE(::testing::Message()
                       << dtypeName(dtype) << " " << K << "x" << N << " rows "
                       << rows << " threads " << threads);
          Matrix m(K, N, dtype, seed++);
          std::vector<float> a = randomFloats(rows * K, seed++);
          absl::StatusOr<std::vector<float>> y = runLinear(m, a, rows, threads);
          ASSERT_TRUE(y.ok()) << y.status();
          expectProduct(m, a, rows, *y, 1e-5);
        }
}

TEST(Linear, EveryWeightTypeMatchesF64) {
  {
    SCOPED_TRACE("oneDNN's f32 matmul where it has brgemm kernels");
    checkEveryWeightType();
  }
  SCOPED_TRACE("sgemm");
  SgemmBlocks sgemm;
  checkEveryWeightType();
}

TEST(Linear, F32RowsOfABatchEqualTheRowsAlone) {
  // f32 weights of a batch of up to kInvariantRowsF32 rows (sequences
  // decoding together) take the register tiles, whose sums are the
  // streaming kernel's: each row of the batch equals that row run alone, bit
  // for bit,
  // at 1 and 3 threads, with K past one chunk of the tiles (1500) and with
  // the activations past L1 (3001, from 3 rows: the tiles' panels).
  const int64_t most = std::min(detail::kInvariantRowsF32,
                                detail::tiledRows(detail::StreamWeights::F32));
  if (most == 0)
    GTEST_SKIP() << "no f32 register tiles on this CPU";
  uint32_t seed = 900;
  for (auto [K, N] : {std::pair<int64_t, int64_t>{1500, 70}, {3001, 40}})
    for (int64_t rows = 2; rows <= most; ++rows)
      for (int threads : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << K << "x" << N << " rows " << rows
                                          << " threads " << threads);
        Matrix m(K, N, DType::F32, seed++);
        std::vector<float> a = randomFloats(rows * K, seed++);
        absl::StatusOr<std::vector<float>> y = runLinear(m, a, rows, threads);
        ASSERT_TRUE(y.ok()) << y.status();
        for (int64_t i = 0; i < rows; ++i) {
          std::vector<float> row(a.begin() + i * K, a.begin() + (i + 1) * K);
          absl::StatusOr<std::vector<float>> alone =
              runLinear(m, row, 1, threads);
          ASSERT_TRUE(alone.ok()) << alone.status();
          for (int64_t n = 0; n < N; ++n)
            ASSERT_EQ((*y)[i * N + n], (*alone)[n]) << "row " << i << " " << n;
        }
      }
}

TEST(Linear, StoresTheWeightTransposedAndNarrowed) {
  Matrix m(64, 32, DType::I8, 5);
  absl::StatusOr<std::vector<uint8_t>> bytes = linearPlan(m, 1);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorLinear);
  detail::SectionEntry section =
      detail::decodeSection(bytes->data() + kFileHeaderSize);
  const fb::Schedule *schedule =
      fb::GetProgram(bytes->data() + section.offset)->schedules()->Get(0);
  const fb::Tensor *w = schedule->tensors()->Get(1);
  const fb::Tensor *scales = schedule->tensors()->Get(2);
  EXPECT_EQ(w->dtype(), fb::DType::I8);
  ASSERT_EQ(w->dims()->size(), 2u);
  EXPECT_EQ(w->dims()->Get(0)->bound(), 32);
  EXPECT_EQ(w->dims()->Get(1)->bound(), 64);
  ASSERT_EQ(scales->dims()->size(), 1u);
  EXPECT_EQ(scales->dims()->Get(0)->bound(), 32);
}

TEST(Linear, NeedsFormat116) {
  Matrix m(16, 8, DType::BF16, 3);
  absl::StatusOr<std::vector<uint8_t>> bytes = linearPlan(m, 1);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorBatchWindows;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas("step 0 is a Linear step, which needs format 1.16, "
                        "but the file is version 1.15"));
}

TEST(Linear, RefusesMismatchedOperands) {
  auto plan = [](DType dtype, bool withScales, int64_t k) {
    PlanWriter writer;
    ScheduleBuilder &s = writer.schedule();
    int32_t a = s.addTensor("a", DType::F32, {PlanDim(2), PlanDim(k)});
    s.addInput(a);
    // Enough for the widest type tried (i64).
    std::vector<uint8_t> zeros(8 * 16 * 8);
    std::vector<int32_t> inputs = {a, s.addWeight("w", dtype, {8, 16},
                                                  zeros.data(),
                                                  8 * 16 * dtypeSize(dtype))};
    if (withScales)
      inputs.push_back(s.addWeight("s", DType::F32, {8}, zeros.data(), 32));
    int32_t y = s.addTensor("y", DType::F32, {PlanDim(2), PlanDim(8)});
    s.addOutput(y);
    s.addStep(fb::OpKind::Linear, "linear", inputs, {y});
    absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return Plan::loadFromMemory(bytes->data(), bytes->size()).status();
  };
  EXPECT_TRUE(plan(DType::BF16, false, 16).ok());
  EXPECT_THAT(plan(DType::BF16, false, 12),
              StatusHas("its last dimension must be K = 16"));
  EXPECT_THAT(plan(DType::I8, false, 16),
              StatusHas("w is i8 and needs its scales [N]"));
  EXPECT_THAT(plan(DType::F16, true, 16),
              StatusHas("scales are for i8 weights; w is f16"));
  EXPECT_THAT(plan(DType::I64, false, 16),
              StatusHas("expected f32, bf16, f16 or i8"));
}

} // namespace
} // namespace moert::testing
