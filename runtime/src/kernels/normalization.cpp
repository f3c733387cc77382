//===- normalization.cpp - LayerNormalization and RMSNorm -----------------===//
//
// LayerNormalization (ONNX opset 17) and SimplifiedLayerNormalization
// (com.microsoft, RMSNorm): normalise over dims [axis, rank), then scale (and
// shift). Statistics accumulate in double.
//
//===----------------------------------------------------------------------===//

#include "kernels/common.h"

#include <vector>

namespace moert::detail {
namespace {

/// Expands a scale/bias operand to the normalised shape X.shape[axis:].
absl::Status expandParameter(const KernelContext &ctx, int i, const Shape &x,
                             int axis, std::vector<float> &out) {
  Shape target;
  target.rank = x.rank - axis;
  std::copy(x.dims + axis, x.dims + x.rank, target.dims);
  const Tensor &p = ctx.in(i);
  Shape broadcast;
  const Shape *shapes[] = {&target, &p.shape};
  if (!broadcastShapes(shapes, 2, broadcast) || broadcast != target)
    return ctx.error("input ", i, " of shape ", p.shape.str(),
                     " does not broadcast to the normalised shape ",
                     target.str());
  out.resize(target.numel());
  const Shape *ps[] = {&p.shape};
  BroadcastLoop loop(target, ps, 1);
  const float *src = p.as<const float>();
  int64_t stride = loop.innerStride(0);
  loop.forEachRun(0, target.numel(),
                  [&](int64_t o, const int64_t *offs, int64_t n) {
                    for (int64_t k = 0; k < n; ++k)
                      out[o + k] = src[offs[0] + k * stride];
                  });
  return absl::OkStatus();
}

/// The sum of `term(x[j])` over the n values of a row, in double, in eight
/// independent chains: one chain waits on every add's latency, and a row of
/// a vision encoder (32 values) is a few of them. (It differs from a
/// sequential sum by double roundings only.)
template <typename Term>
double rowSum(const float *x, int64_t n, const Term &term) {
  constexpr int kLanes = 8;
  double sums[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      sums[l] += term(x[j + l]);
  for (; j < n; ++j)
    sums[0] += term(x[j]);
  double sum = 0;
  for (double s : sums)
    sum += s;
  return sum;
}

/// The shape of the per-row statistics outputs: X.shape[:axis] + 1s.
Shape statsShape(const Shape &x, int axis) {
  Shape shape = x;
  for (int d = axis; d < x.rank; ++d)
    shape[d] = 1;
  return shape;
}

template <bool kSimplified> absl::Status normKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::NormAttrs>();
  const Tensor &x = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(int axis, ctx.axis(attrs->axis(), x.shape.rank));
  std::vector<float> scale, bias;
  MOERT_RETURN_IF_ERROR(expandParameter(ctx, 1, x.shape, axis, scale));
  bool hasBias = !kSimplified && ctx.has(2);
  if (hasBias)
    MOERT_RETURN_IF_ERROR(expandParameter(ctx, 2, x.shape, axis, bias));
  MOERT_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate(0, x.shape));
  // Optional statistics: LayerNormalization's Mean and InvStdDev, RMSNorm's
  // inverse RMS.
  float *meanOut = nullptr, *invOut = nullptr;
  Shape stats = statsShape(x.shape, axis);
  for (int o = 1; o < ctx.numOutputs(); ++o) {
    MOERT_ASSIGN_OR_RETURN(Tensor * t, ctx.allocate(o, stats));
    (kSimplified || o == 2 ? invOut : meanOut) = t->as<float>();
  }
  int64_t rows = x.shape.span(0, axis), n = x.shape.span(axis, x.shape.rank);
  double epsilon = attrs->epsilon();
  const float *px = x.as<const float>();
  float *py = y->as<float>();
  ctx.pool().parallelFor(
      rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)),
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float *in = px + r * n;
          float *out = py + r * n;
          double mean = 0;
          if (!kSimplified) {
            mean = rowSum(in, n, [](float v) { return double(v); });
            mean = n ? mean / n : 0;
          }
          double var = rowSum(in, n, [mean](float v) {
            double d = v - mean;
            return d * d;
          });
          var = n ? var / n : 0;
          float inv = static_cast<float>(1.0 / std::sqrt(var + epsilon));
          float m = static_cast<float>(mean);
          for (int64_t j = 0; j < n; ++j) {
            float v = (in[j] - m) * inv * scale[j];
            out[j] = hasBias ? v + bias[j] : v;
          }
          if (meanOut)
            meanOut[r] = m;
          if (invOut)
            invOut[r] = inv;
        }
      });
  return absl::OkStatus();
}

absl::Status validateNorm(const StepCheck &check) {
  for (int i = 0; i < check.numInputs(); ++i)
    MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
  int rank = check.in(0).rank;
  MOERT_ASSIGN_OR_RETURN(
      int axis, check.axis(check.attrs<fb::NormAttrs>()->axis(), rank));
  for (int i = 1; i < check.numInputs(); ++i)
    if (check.has(i) && check.in(i).rank > rank - axis)
      return check.error("input ", i, " has rank ", check.in(i).rank,
                         ", more than the ", rank - axis,
                         " normalised dimensions");
  if (!(check.attrs<fb::NormAttrs>()->epsilon() >= 0))
    return check.error("epsilon must be non-negative");
  for (int o = 0; o < check.numOutputs(); ++o) {
    MOERT_RETURN_IF_ERROR(check.outType(o, kFloatTypes));
    MOERT_RETURN_IF_ERROR(check.outRank(o, rank));
  }
  return absl::OkStatus();
}

} // namespace

void registerNormalizationOps(OpRegistry &r) {
  OpDef layerNorm = makeOp("LayerNormalization", 2, 3, validateNorm,
                           normKernel<false>, fb::Attrs::NormAttrs);
  layerNorm.optionalInputs = 0b100;
  layerNorm.maxOutputs = 3;
  layerNorm.inPlaceInputs = kInPlaceFirst;
  r.add(fb::OpKind::LayerNormalization, layerNorm);
  OpDef rmsNorm = makeOp("SimplifiedLayerNormalization", 2, 2, validateNorm,
                         normKernel<true>, fb::Attrs::NormAttrs);
  rmsNorm.maxOutputs = 2;
  rmsNorm.inPlaceInputs = kInPlaceFirst;
  r.add(fb::OpKind::SimplifiedLayerNormalization, rmsNorm);
}

} // namespace moert::detail
