//===- fast_math_test.cpp - Vectorisable math functions -------------------===//

#include "kernels/fast_math.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>

namespace moert::detail {
namespace {

/// Distance in units in the last place between two finite floats of one
/// sign.
int64_t ulps(float a, float b) {
  return std::llabs(int64_t{floatToBits(a)} - int64_t{floatToBits(b)});
}

TEST(FastMath, ExpIsWithinTwoUlpsEverywhere) {
  int64_t worst = 0;
  // Every 61st float bit pattern with a finite, non-overflowing exp.
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 61) {
    float x = bitsToFloat(static_cast<int32_t>(bits));
    if (!(x > -104.0f && x < 88.7f))
      continue;
    float expected = static_cast<float>(std::exp(static_cast<double>(x)));
    worst = std::max(worst, ulps(fastExp(x), expected));
  }
  EXPECT_LE(worst, 2);
}

TEST(FastMath, ExpLimitsAndSpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fastExp(0.0f), 1.0f);
  EXPECT_EQ(fastExp(-kInf), 0.0f);
  EXPECT_EQ(fastExp(kInf), kInf);
  EXPECT_EQ(fastExp(89.0f), kInf);
  EXPECT_EQ(fastExp(-120.0f), 0.0f);
  EXPECT_TRUE(std::isnan(fastExp(std::nanf(""))));
  // A subnormal result keeps its precision.
  float tiny = fastExp(-100.0f);
  EXPECT_LE(ulps(tiny, static_cast<float>(std::exp(-100.0))), 1);
  EXPECT_EQ(fastSigmoid(-200.0f), 0.0f);
  EXPECT_EQ(fastSigmoid(200.0f), 1.0f);
  EXPECT_FLOAT_EQ(fastSigmoid(0.0f), 0.5f);
}

TEST(FastMath, ErfIsWithinSixUlpsEverywhere) {
  int64_t worst = 0;
  double worstRelative = 0;
  // Every 61st float bit pattern (both signs), and a dense grid where erf
  // bends.
  auto check = [&](float x) {
    double exact = std::erf(static_cast<double>(x));
    float expected = static_cast<float>(exact);
    float got = fastErf(x);
    worst = std::max(worst, ulps(got, expected));
    // Subnormal results have fewer bits than their relative error needs.
    if (std::fabs(exact) >= std::numeric_limits<float>::min())
      worstRelative = std::max(worstRelative, std::fabs((got - exact) / exact));
  };
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 61) {
    float x = bitsToFloat(static_cast<int32_t>(bits));
    if (std::isfinite(x))
      check(x);
  }
  for (int i = -600000; i <= 600000; ++i)
    check(i * 1e-5f);
  EXPECT_LE(worst, 6);
  EXPECT_LE(worstRelative, 4e-7);
}

TEST(FastMath, ErfLimitsAndSpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fastErf(0.0f), 0.0f);
  EXPECT_EQ(fastErf(kInf), 1.0f);
  EXPECT_EQ(fastErf(-kInf), -1.0f);
  EXPECT_EQ(fastErf(10.0f), 1.0f);
  EXPECT_EQ(fastErf(-10.0f), -1.0f);
  EXPECT_TRUE(std::isnan(fastErf(std::nanf(""))));
  // Odd, and linear near 0: erf(x) = 2x / sqrt(pi) for tiny x.
  EXPECT_EQ(fastErf(-0.5f), -fastErf(0.5f));
  EXPECT_FLOAT_EQ(fastErf(1e-20f), 1.1283791e-20f);
}

TEST(FastMath, SoftmaxRowWithMinusInfinityAndSinks) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // -inf entries get exactly 0 and take nothing from the others.
  float row[4] = {1.0f, -kInf, 2.0f, -kInf};
  softmaxRow(row, row, 4);
  double e = std::exp(1.0);
  EXPECT_EQ(row[1], 0.0f);
  EXPECT_EQ(row[3], 0.0f);
  EXPECT_NEAR(row[0], 1.0 / (1.0 + e), 1e-7);
  EXPECT_NEAR(row[2], e / (1.0 + e), 1e-7);
  // A sink above every entry: the maximum is the sink's, and it takes its
  // share of the sum.
  float sinkRow[2] = {0.0f, -kInf};
  float sink = 3.0f;
  softmaxRow(sinkRow, sinkRow, 2, &sink);
  EXPECT_NEAR(sinkRow[0], 1.0 / (1.0 + std::exp(3.0)), 1e-7);
  EXPECT_EQ(sinkRow[1], 0.0f);
  // Only -inf: zeros with a finite sink, NaN without one (as Softmax).
  float masked[3] = {-kInf, -kInf, -kInf};
  softmaxRow(masked, masked, 3, &sink);
  for (float p : masked)
    EXPECT_EQ(p, 0.0f);
  float bare[3] = {-kInf, -kInf, -kInf};
  softmaxRow(bare, bare, 3);
  for (float p : bare)
    EXPECT_TRUE(std::isnan(p));
}

} // namespace
} // namespace moert::detail
