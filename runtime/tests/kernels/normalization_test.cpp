//===- normalization_test.cpp - LayerNormalization and RMSNorm ------------===//

#include "test_util.h"

#include <cmath>

namespace moert::testing {
namespace {

using fb::OpKind;

TEST(LayerNorm, LastAxisWithBiasAndStatistics) {
  // Rows of 8 and of 37 values (the statistics sum in chains of 8: 37
  // leaves a tail).
  for (int n : {8, 37}) {
    SCOPED_TRACE(n);
    const int rows = 3;
    std::vector<float> x = randomFloats(rows * n, 21);
    std::vector<float> scale = randomFloats(n, 22), bias = randomFloats(n, 23);
    fb::NormAttrsT a;
    a.epsilon = 1e-3f;
    auto r = runStep(OpKind::LayerNormalization,
                     {f32({rows, n}, x), f32({n}, scale), f32({n}, bias)},
                     {{DType::F32, {rows, n}},
                      {DType::F32, {rows, 1}},
                      {DType::F32, {rows, 1}}},
                     attrs(a));
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<float> y, means, invs;
    for (int i = 0; i < rows; ++i) {
      double mean = 0, var = 0;
      for (int j = 0; j < n; ++j)
        mean += x[i * n + j];
      mean /= n;
      for (int j = 0; j < n; ++j)
        var += (x[i * n + j] - mean) * (x[i * n + j] - mean);
      var /= n;
      double inv = 1 / std::sqrt(var + 1e-3);
      for (int j = 0; j < n; ++j)
        y.push_back(static_cast<float>((x[i * n + j] - mean) * inv * scale[j] +
                                       bias[j]));
      means.push_back(static_cast<float>(mean));
      invs.push_back(static_cast<float>(inv));
    }
    expectNear((*r)[0], {rows, n}, y, 1e-5f);
    expectNear((*r)[1], {rows, 1}, means);
    expectNear((*r)[2], {rows, 1}, invs);
  }
}

TEST(LayerNorm, AxisOneOfRank3NormalisesTwoDims) {
  // Normalise over [2, 2] per batch element; scale broadcasts over dim 0.
  Value x = f32({2, 2, 2}, {1, 2, 3, 4, 0, 0, 0, 8});
  fb::NormAttrsT a;
  a.axis = 1;
  a.epsilon = 0;
  Value y = run1(OpKind::LayerNormalization, {x, f32({2}, {1, 2})},
                 {DType::F32, {2, 2, 2}}, attrs(a));
  float s = 1 / std::sqrt(1.25f);
  float t = 1 / std::sqrt(12.0f);
  expectNear(y, {2, 2, 2},
             {-1.5f * s, -0.5f * s * 2, 0.5f * s, 1.5f * s * 2, -2 * t,
              -2 * t * 2, -2 * t, 6 * t * 2});
}

TEST(RMSNorm, MatchesDefinition) {
  const int rows = 2, n = 16;
  std::vector<float> x = randomFloats(rows * n, 31),
                     scale = randomFloats(n, 32);
  fb::NormAttrsT a;
  a.epsilon = 1e-6f;
  auto r =
      runStep(OpKind::SimplifiedLayerNormalization,
              {f32({rows, n}, x), f32({n}, scale)},
              {{DType::F32, {rows, n}}, {DType::F32, {rows, 1}}}, attrs(a));
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> y, invs;
  for (int i = 0; i < rows; ++i) {
    double ms = 0;
    for (int j = 0; j < n; ++j)
      ms += double(x[i * n + j]) * x[i * n + j];
    double inv = 1 / std::sqrt(ms / n + 1e-6);
    for (int j = 0; j < n; ++j)
      y.push_back(static_cast<float>(x[i * n + j] * inv * scale[j]));
    invs.push_back(static_cast<float>(inv));
  }
  expectNear((*r)[0], {rows, n}, y);
  expectNear((*r)[1], {rows, 1}, invs);
}

TEST(RMSNorm, ScaleOfTheWrongShapeIsAnError) {
  fb::NormAttrsT a;
  auto r = runStep(OpKind::SimplifiedLayerNormalization,
                   {f32({2, 4}, std::vector<float>(8)), f32({3}, {1, 1, 1})},
                   {{DType::F32, {2, 4}}}, attrs(a));
  EXPECT_THAT(r.status(),
              StatusHas("does not broadcast to the normalised shape [4]"));
}

} // namespace
} // namespace moert::testing
