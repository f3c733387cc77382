//===- grid_sample.cpp - ONNX GridSample on 4-D inputs --------------------===//
//
// y[n, c, i, j] samples the image x[n, c] at grid[n, i, j] = (gx, gy) in
// [-1, 1], as onnxruntime's CPU GridSample computes it (f32 throughout) and
// PyTorch's grid_sample defines it: the point is denormalised to pixel
// coordinates (rounded to even for Nearest) and interpolated from the pixels
// around it, each pixel index taken through the padding mode (Zeros: 0
// outside the image; Border: the index clamped into the image; Reflection:
// the index reflected at the image's extent, the corner centres with
// align_corners, else their outer edges). Cubic uses Keys' kernel with
// A = -0.75 over the 4x4 pixels around the point.
//
// Work is split over (n, i) rows of the grid; each grid point is resolved
// once and applied to every channel.
//
//===----------------------------------------------------------------------===//

#include "exec/thread_pool.h"
#include "kernels/common.h"

#include <algorithm>
#include <cmath>

namespace moert::detail {
namespace {

/// One image's sizes and the attributes that resolve a grid point.
struct Sampler {
  int64_t height = 0, width = 0;
  fb::GridSampleMode mode = fb::GridSampleMode::Linear;
  fb::GridSamplePadding padding = fb::GridSamplePadding::Zeros;
  bool alignCorners = false;
  /// The extent Reflection reflects at: [xMin, xMax] x [yMin, yMax].
  float xMin = 0, xMax = 0, yMin = 0, yMax = 0;

  /// Grid value `v` in [-1, 1] as a pixel coordinate along an axis of
  /// `length` pixels.
  float denormalize(float v, int64_t length) const {
    return alignCorners ? (v + 1) / 2.0f * static_cast<float>(length - 1)
                        : ((v + 1) * static_cast<float>(length) - 1) / 2.0f;
  }

  /// `v` reflected into [lo, hi] (onnxruntime's GsReflect; a value that is
  /// not finite, or an empty extent, gives `lo`).
  static float reflect(float v, float lo, float hi) {
    float range = hi - lo;
    if (!std::isfinite(v) || !(range > 0))
      return lo;
    if (v < lo || v > hi) {
      float d = v < lo ? lo - v : v - hi;
      float turns = std::floor(d / range);
      float r = d - turns * range;
      bool even = std::fmod(turns, 2.0f) == 0;
      return (v < lo) == even ? lo + r : hi - r;
    }
    return v;
  }

  /// Pixel (r, c) of `plane` through the padding mode.
  float pixel(const float *plane, int64_t r, int64_t c) const {
    switch (padding) {
    case fb::GridSamplePadding::Zeros:
      return r >= 0 && r < height && c >= 0 && c < width ? plane[r * width + c]
                                                         : 0.0f;
    case fb::GridSamplePadding::Border:
      r = std::clamp<int64_t>(r, 0, height - 1);
      c = std::clamp<int64_t>(c, 0, width - 1);
      return plane[r * width + c];
    case fb::GridSamplePadding::Reflection:
      break;
    }
    c = static_cast<int64_t>(reflect(static_cast<float>(c), xMin, xMax));
    r = static_cast<int64_t>(reflect(static_cast<float>(r), yMin, yMax));
    // A reflection lands in [-0.5, size - 0.5]; its truncation is a pixel.
    r = std::clamp<int64_t>(r, 0, height - 1);
    c = std::clamp<int64_t>(c, 0, width - 1);
    return plane[r * width + c];
  }

  /// The point (gx, gy) as pixel coordinates, rounded for Nearest. The
  /// padding applies to each pixel the interpolation reads, not to the
  /// point. A point far outside the image moves to where every pixel it
  /// reads is the same (by the period of the reflection for Reflection),
  /// which keeps the pixel indices small; NaN goes to the image's corner.
  void resolve(float gx, float gy, float &x, float &y) const {
    x = keepNear(denormalize(gx, width), width, xMin, xMax);
    y = keepNear(denormalize(gy, height), height, yMin, yMax);
    if (mode == fb::GridSampleMode::Nearest) {
      x = std::nearbyint(x);
      y = std::nearbyint(y);
    }
  }

  /// `v` moved as resolve() says along an axis of `length` pixels.
  float keepNear(float v, int64_t length, float lo, float hi) const {
    constexpr float kFar = 1 << 20;
    if (std::isnan(v))
      return lo;
    if (padding != fb::GridSamplePadding::Reflection)
      return std::clamp(v, -4.0f, static_cast<float>(length + 3));
    if (std::abs(v) <= kFar)
      return v;
    float period = 2 * (hi - lo);
    if (std::isinf(v) || !(period > 0))
      return lo;
    float r = std::fmod(v - lo, period);
    return lo + (r < 0 ? r + period : r);
  }
};

/// Keys' cubic convolution weights of the 4 taps around a point at
/// fraction `t` in [0, 1) past the second tap, A = -0.75.
void cubicWeights(float t, float w[4]) {
  constexpr float a = -0.75f;
  t = std::abs(t);
  float t1 = t + 1, u = 1 - t, u1 = 2 - t;
  w[0] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
  w[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  w[2] = ((a + 2) * u - (a + 3)) * u * u + 1;
  w[3] = ((a * u1 - 5 * a) * u1 + 8 * a) * u1 - 4 * a;
}

absl::Status gridSampleKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::GridSampleAttrs>();
  const Shape &xs = ctx.in(0).shape, &gs = ctx.in(1).shape;
  if (gs[0] != xs[0] || gs[3] != 2)
    return ctx.error("grid ", gs.str(), " is not [", xs[0],
                     ", Ho, Wo, 2] for the input ", xs.str());
  int64_t batch = xs[0], channels = xs[1], outH = gs[1], outW = gs[2];
  Sampler s;
  s.height = xs[2];
  s.width = xs[3];
  s.mode = attrs->mode();
  s.padding = attrs->padding_mode();
  s.alignCorners = attrs->align_corners();
  s.xMin = s.alignCorners ? 0.0f : -0.5f;
  s.yMin = s.xMin;
  s.xMax = static_cast<float>(s.width) - (s.alignCorners ? 1.0f : 0.5f);
  s.yMax = static_cast<float>(s.height) - (s.alignCorners ? 1.0f : 0.5f);
  MOERT_ASSIGN_OR_RETURN(Tensor * out,
                         ctx.allocate(0, Shape{batch, channels, outH, outW}));
  if (out->numel() == 0)
    return absl::OkStatus();
  if (s.height == 0 || s.width == 0)
    return ctx.error("cannot sample the empty image ", xs.str());
  const float *x = ctx.in(0).as<const float>();
  const float *grid = ctx.in(1).as<const float>();
  float *y = out->as<float>();
  int64_t plane = s.height * s.width, outPlane = outH * outW;

  auto sampleRow = [&](int64_t row) {
    int64_t n = row / outH, i = row % outH;
    const float *image = x + n * channels * plane;
    for (int64_t j = 0; j < outW; ++j) {
      const float *g = grid + ((n * outH + i) * outW + j) * 2;
      float px, py;
      s.resolve(g[0], g[1], px, py);
      float *dst = y + n * channels * outPlane + i * outW + j;
      if (s.mode == fb::GridSampleMode::Nearest) {
        auto r = static_cast<int64_t>(py), c = static_cast<int64_t>(px);
        for (int64_t ch = 0; ch < channels; ++ch)
          dst[ch * outPlane] = s.pixel(image + ch * plane, r, c);
      } else if (s.mode == fb::GridSampleMode::Linear) {
        auto x1 = static_cast<int64_t>(std::floor(px));
        auto y1 = static_cast<int64_t>(std::floor(py));
        float dx1 = px - static_cast<float>(x1), dx2 = 1 - dx1;
        float dy1 = py - static_cast<float>(y1), dy2 = 1 - dy1;
        for (int64_t ch = 0; ch < channels; ++ch) {
          const float *p = image + ch * plane;
          float p11 = s.pixel(p, y1, x1), p12 = s.pixel(p, y1, x1 + 1);
          float p21 = s.pixel(p, y1 + 1, x1), p22 = s.pixel(p, y1 + 1, x1 + 1);
          dst[ch * outPlane] =
              dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22);
        }
      } else {
        int64_t x0 = static_cast<int64_t>(std::floor(px)) - 1;
        int64_t y0 = static_cast<int64_t>(std::floor(py)) - 1;
        float wx[4], wy[4];
        cubicWeights(px - static_cast<float>(x0) - 1, wx);
        cubicWeights(py - static_cast<float>(y0) - 1, wy);
        for (int64_t ch = 0; ch < channels; ++ch) {
          const float *p = image + ch * plane;
          float sum = 0;
          for (int64_t a = 0; a < 4; ++a) {
            float rowSum = 0;
            for (int64_t b = 0; b < 4; ++b)
              rowSum += wx[b] * s.pixel(p, y0 + a, x0 + b);
            sum += wy[a] * rowSum;
          }
          dst[ch * outPlane] = sum;
        }
      }
    }
  };
  ctx.pool().parallelFor(batch * outH, rowGrain(outW * channels * 16),
                         [&](int64_t r0, int64_t r1) {
                           for (int64_t r = r0; r < r1; ++r)
                             sampleRow(r);
                         });
  return absl::OkStatus();
}

absl::Status validateGridSample(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 4));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 4));
  MOERT_RETURN_IF_ERROR(check.outRank(0, 4));
  const auto *attrs = check.attrs<fb::GridSampleAttrs>();
  if (attrs->mode() > fb::GridSampleMode::MAX)
    return check.error("unknown mode ", static_cast<int>(attrs->mode()));
  if (attrs->padding_mode() > fb::GridSamplePadding::MAX)
    return check.error("unknown padding_mode ",
                       static_cast<int>(attrs->padding_mode()));
  return absl::OkStatus();
}

} // namespace

void registerGridSampleOps(OpRegistry &r) {
  r.add(fb::OpKind::GridSample,
        makeOp("GridSample", 2, 2, validateGridSample, gridSampleKernel,
               fb::Attrs::GridSampleAttrs));
}

} // namespace moert::detail
