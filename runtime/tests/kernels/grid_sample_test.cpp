//===- grid_sample_test.cpp - GridSample against an f64 reference ---------===//

#include "format/plan_writer.h"
#include "plan_bytes.h"
#include "test_util.h"

#include <cmath>

namespace moert::testing {
namespace {

using fb::GridSampleMode;
using fb::GridSamplePadding;
using fb::OpKind;

/// GridSample by the ONNX definition (as onnxruntime and PyTorch compute
/// it), in f64: x [N, C, H, W], grid [N, Ho, Wo, 2] -> [N, C, Ho, Wo]; the
/// padding mode applies to each pixel index the interpolation reads.
struct Reference {
  int64_t h, w;
  GridSampleMode mode;
  GridSamplePadding padding;
  bool align;

  double lo() const { return align ? 0.0 : -0.5; }
  double hiX() const { return align ? w - 1.0 : w - 0.5; }
  double hiY() const { return align ? h - 1.0 : h - 0.5; }

  static double reflect(double v, double lo, double hi) {
    while (v < lo || v > hi)
      v = v < lo ? 2 * lo - v : 2 * hi - v;
    return v;
  }

  double pixel(const float *p, int64_t r, int64_t c) const {
    if (padding == GridSamplePadding::Zeros)
      return r < 0 || r >= h || c < 0 || c >= w ? 0.0 : p[r * w + c];
    if (padding == GridSamplePadding::Reflection) {
      c = static_cast<int64_t>(reflect(double(c), lo(), hiX()));
      r = static_cast<int64_t>(reflect(double(r), lo(), hiY()));
    }
    r = std::min<int64_t>(std::max<int64_t>(r, 0), h - 1);
    c = std::min<int64_t>(std::max<int64_t>(c, 0), w - 1);
    return p[r * w + c];
  }

  static double cubic(double t) {
    const double a = -0.75;
    t = std::abs(t);
    if (t <= 1)
      return ((a + 2) * t - (a + 3)) * t * t + 1;
    if (t < 2)
      return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
    return 0;
  }

  double sample(const float *p, double gx, double gy) const {
    double x = align ? (gx + 1) / 2 * (w - 1) : ((gx + 1) * w - 1) / 2;
    double y = align ? (gy + 1) / 2 * (h - 1) : ((gy + 1) * h - 1) / 2;
    if (mode == GridSampleMode::Nearest) {
      x = std::nearbyint(x);
      y = std::nearbyint(y);
    }
    if (mode == GridSampleMode::Nearest)
      return pixel(p, static_cast<int64_t>(y), static_cast<int64_t>(x));
    auto fx = static_cast<int64_t>(std::floor(x));
    auto fy = static_cast<int64_t>(std::floor(y));
    double sum = 0;
    if (mode == GridSampleMode::Linear) {
      for (int64_t r = fy; r <= fy + 1; ++r)
        for (int64_t c = fx; c <= fx + 1; ++c)
          sum += (1 - std::abs(y - r)) * (1 - std::abs(x - c)) * pixel(p, r, c);
      return sum;
    }
    for (int64_t r = fy - 1; r <= fy + 2; ++r)
      for (int64_t c = fx - 1; c <= fx + 2; ++c)
        sum += cubic(y - r) * cubic(x - c) * pixel(p, r, c);
    return sum;
  }
};

fb::AttrsUnion gridAttrs(GridSampleMode mode, GridSamplePadding padding,
                         bool align) {
  fb::GridSampleAttrsT a;
  a.mode = mode;
  a.padding_mode = padding;
  a.align_corners = align;
  return attrs(a);
}

/// Runs GridSample on a random image and a grid of `grid` (or random values
/// in [-1.4, 1.4]) and compares it with the reference.
void expectMatchesReference(std::vector<int64_t> xShape,
                            std::vector<int64_t> gShape, GridSampleMode mode,
                            GridSamplePadding padding, bool align,
                            std::vector<float> grid = {}, int threads = 2) {
  std::vector<float> x = randomFloats(numelOf(xShape), 51);
  if (grid.empty()) {
    grid = randomFloats(numelOf(gShape), 52);
    for (float &v : grid)
      v *= 1.4f;
  }
  Reference ref{xShape[2], xShape[3], mode, padding, align};
  std::vector<int64_t> shape{xShape[0], xShape[1], gShape[1], gShape[2]};
  std::vector<float> want;
  int64_t plane = xShape[2] * xShape[3];
  for (int64_t n = 0; n < shape[0]; ++n)
    for (int64_t c = 0; c < shape[1]; ++c)
      for (int64_t i = 0; i < shape[2]; ++i)
        for (int64_t j = 0; j < shape[3]; ++j) {
          const float *g =
              grid.data() + ((n * shape[2] + i) * shape[3] + j) * 2;
          want.push_back(static_cast<float>(
              ref.sample(x.data() + (n * shape[1] + c) * plane, g[0], g[1])));
        }
  Value y = run1(OpKind::GridSample, {f32(xShape, x), f32(gShape, grid)},
                 {DType::F32, dimsOf(shape)}, gridAttrs(mode, padding, align),
                 threads);
  expectNear(y, shape, want, 1e-5f);
}

TEST(GridSample, EveryModePaddingAndAlignmentMatchesTheReference) {
  for (GridSampleMode mode :
       {GridSampleMode::Linear, GridSampleMode::Nearest, GridSampleMode::Cubic})
    for (GridSamplePadding padding :
         {GridSamplePadding::Zeros, GridSamplePadding::Border,
          GridSamplePadding::Reflection})
      for (bool align : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "mode " << static_cast<int>(mode) << " padding "
                     << static_cast<int>(padding) << " align " << align);
        expectMatchesReference({2, 3, 5, 4}, {2, 3, 6, 2}, mode, padding,
                               align);
      }
}

TEST(GridSample, GlmPositionTableIsCubicBorderInside) {
  // GLM-4.5V samples a [1, C, S, S] position table at each patch centre.
  std::vector<float> grid;
  for (int i = 0; i < 7; ++i) {
    grid.push_back((2.0f * i + 1) / 7 - 1);
    grid.push_back(1 - (2.0f * i + 1) / 7);
  }
  expectMatchesReference({1, 8, 6, 6}, {1, 7, 1, 2}, GridSampleMode::Cubic,
                         GridSamplePadding::Border, false, grid, 1);
}

TEST(GridSample, NearestRoundsHalfToEven) {
  // W = 4, align_corners = 0: gx = -0.5, 0, 0.5 fall on x = 0.5, 1.5, 2.5,
  // which round to 0, 2, 2.
  std::vector<float> x{10, 11, 12, 13};
  std::vector<float> grid{-0.5f, 0, 0, 0, 0.5f, 0};
  Value y =
      run1(OpKind::GridSample, {f32({1, 1, 1, 4}, x), f32({1, 1, 3, 2}, grid)},
           {DType::F32, dimsOf({1, 1, 1, 3})},
           gridAttrs(GridSampleMode::Nearest, GridSamplePadding::Zeros, false));
  expectNear(y, {1, 1, 1, 3}, {10, 12, 12}, 0.0f);
}

TEST(GridSample, GridOfAnotherBatchIsAnError) {
  auto r = runStep(
      OpKind::GridSample,
      {f32({2, 1, 2, 2}, randomFloats(8, 1)), f32({1, 1, 1, 2}, {0, 0})},
      {{DType::F32, {2, 1, 1, 1}}},
      gridAttrs(GridSampleMode::Linear, GridSamplePadding::Zeros, false));
  EXPECT_THAT(r.status(), StatusHas("is not [2, Ho, Wo, 2]"));
}

TEST(GridSample, NeedsFormat118) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t x = s.addTensor("x", DType::F32, dimsOf({1, 2, 4, 4}));
  int32_t g = s.addTensor("grid", DType::F32, dimsOf({1, 3, 3, 2}));
  int32_t y = s.addTensor("y", DType::F32, dimsOf({1, 2, 3, 3}));
  s.addInput(x);
  s.addInput(g);
  s.addOutput(y);
  s.addStep(OpKind::GridSample, "grid_sample", {x, g}, {y},
            gridAttrs(GridSampleMode::Cubic, GridSamplePadding::Border, false));
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorGridSample);
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorMultimodal;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas("step 0 is a GridSample step, which needs format "
                        "1.18, but the file is version 1.17"));
}

} // namespace
} // namespace moert::testing
