//===- conv.cpp - Conv over any number of spatial axes --------------------===//
//
// ONNX Conv as GEMMs over an im2col matrix: for each group, the rows are the
// output positions of every batch element (n, o1..ok) and the columns the
// group's input channels times the kernel positions (c, k1..kk), so that
// y[n, m, o] = sum over (c, k) of col[(n, o), (c, k)] * w[m, (c, k)] is one
// product of col by w^T. The patch embeddings of vision encoders (kernel =
// stride, no padding, the image one patch) have one output position per
// batch element and read x as it is: col is x itself, [N, C * K], and the
// whole step one GEMM.
//
// col is built in chunks of rows, so that its size stays bounded whatever
// the image; each chunk is filled in parallel, then multiplied by
// parallelSgemm.
//
//===----------------------------------------------------------------------===//

#include "exec/thread_pool.h"
#include "kernels/common.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace moert::detail {
namespace {

/// Most elements of one im2col chunk (16 MiB of f32).
constexpr int64_t kMaxColumnChunk = int64_t(1) << 22;

/// A Conv's sizes, resolved from its operands and attributes.
struct ConvGeometry {
  int spatial = 0;
  int64_t batch = 0, channels = 0, filters = 0, group = 1;
  int64_t input[kMaxRank] = {}, kernel[kMaxRank] = {}, output[kMaxRank] = {};
  int64_t stride[kMaxRank] = {}, dilation[kMaxRank] = {},
          padBegin[kMaxRank] = {};
  /// Product of the kernel sizes, of the output sizes, of the input sizes.
  int64_t kernelSize = 1, outputSize = 1, inputSize = 1;

  int64_t groupChannels() const { return channels / group; }
  int64_t groupFilters() const { return filters / group; }
  int64_t columns() const { return groupChannels() * kernelSize; }
  /// Whether every output position reads exactly the whole input, in order:
  /// col is then x itself.
  bool readsInputAsIs() const {
    if (outputSize != 1 || group != 1)
      return false;
    for (int i = 0; i < spatial; ++i)
      if (padBegin[i] != 0 || kernel[i] != input[i] ||
          (kernel[i] > 1 && dilation[i] != 1))
        return false;
    return true;
  }
};

/// A per-axis list attribute, or `fallback` on each axis when it is absent
/// or empty.
void readList(const flatbuffers::Vector<int64_t> *list, int count,
              int64_t fallback, int64_t *out) {
  for (int i = 0; i < count; ++i)
    out[i] = list && list->size() ? list->Get(i) : fallback;
}

absl::StatusOr<ConvGeometry> planConv(const KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::ConvAttrs>();
  const Shape &x = ctx.in(0).shape, &w = ctx.in(1).shape;
  ConvGeometry g;
  g.spatial = x.rank - 2;
  g.batch = x[0];
  g.channels = x[1];
  g.filters = w[0];
  g.group = attrs->group();
  if (g.channels != w[1] * g.group)
    return ctx.error("input has ", g.channels, " channels; the weight ",
                     w.str(), " with group ", g.group, " takes ",
                     w[1] * g.group);
  if (g.filters % g.group != 0)
    return ctx.error("the weight's ", g.filters,
                     " filters do not divide into group ", g.group);
  if (ctx.has(2) && ctx.in(2).shape.numel() != g.filters)
    return ctx.error("bias ", ctx.in(2).shape.str(), " does not have ",
                     g.filters, " elements");
  int64_t pads[2 * kMaxRank];
  readList(attrs->strides(), g.spatial, 1, g.stride);
  readList(attrs->dilations(), g.spatial, 1, g.dilation);
  readList(attrs->pads(), 2 * g.spatial, 0, pads);
  for (int i = 0; i < g.spatial; ++i) {
    g.input[i] = x[2 + i];
    g.kernel[i] = w[2 + i];
    int64_t extent = g.dilation[i] * (g.kernel[i] - 1) + 1;
    int64_t padEnd = pads[g.spatial + i];
    g.padBegin[i] = pads[i];
    switch (attrs->auto_pad()) {
    case fb::AutoPad::Explicit:
      break;
    case fb::AutoPad::Valid:
      g.padBegin[i] = padEnd = 0;
      break;
    case fb::AutoPad::SameUpper:
    case fb::AutoPad::SameLower: {
      int64_t out = (g.input[i] + g.stride[i] - 1) / g.stride[i];
      int64_t total =
          std::max<int64_t>(0, (out - 1) * g.stride[i] + extent - g.input[i]);
      g.padBegin[i] = attrs->auto_pad() == fb::AutoPad::SameUpper
                          ? total / 2
                          : total - total / 2;
      padEnd = total - g.padBegin[i];
      break;
    }
    }
    int64_t padded = g.input[i] + g.padBegin[i] + padEnd;
    if (padded < extent)
      return ctx.error("spatial axis ", i, ": the kernel spans ", extent,
                       " but the padded input has ", padded);
    g.output[i] = (padded - extent) / g.stride[i] + 1;
    g.kernelSize *= g.kernel[i];
    g.outputSize *= g.output[i];
    g.inputSize *= g.input[i];
  }
  return g;
}

/// Fills rows [row0, row1) of group `gi`'s im2col matrix (row r is batch
/// element r / outputSize at output position r % outputSize).
void fillColumns(const ConvGeometry &g, int64_t gi, const float *x,
                 int64_t row0, int64_t row1, float *col) {
  int64_t columns = g.columns();
  int64_t channelBase = gi * g.groupChannels();
  for (int64_t r = row0; r < row1; ++r) {
    int64_t n = r / g.outputSize, o = r % g.outputSize;
    // The output position's coordinates, then each axis's first input
    // coordinate (which may lie in the padding).
    int64_t origin[kMaxRank];
    for (int i = g.spatial - 1; i >= 0; --i) {
      origin[i] = (o % g.output[i]) * g.stride[i] - g.padBegin[i];
      o /= g.output[i];
    }
    float *dst = col + (r - row0) * columns;
    for (int64_t c = 0; c < g.groupChannels(); ++c) {
      const float *plane = x + (n * g.channels + channelBase + c) * g.inputSize;
      int64_t k[kMaxRank] = {};
      for (int64_t kk = 0; kk < g.kernelSize; ++kk) {
        int64_t offset = 0;
        bool inside = true;
        for (int i = 0; i < g.spatial; ++i) {
          int64_t at = origin[i] + k[i] * g.dilation[i];
          inside &= at >= 0 && at < g.input[i];
          offset = offset * g.input[i] + at;
        }
        *dst++ = inside ? plane[offset] : 0.0f;
        for (int i = g.spatial - 1; i >= 0 && ++k[i] == g.kernel[i]; --i)
          k[i] = 0;
      }
    }
  }
}

absl::Status convKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(ConvGeometry g, planConv(ctx));
  Shape shape{g.batch, g.filters};
  for (int i = 0; i < g.spatial; ++i)
    shape.push(g.output[i]);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  const float *x = ctx.in(0).as<const float>();
  const float *w = ctx.in(1).as<const float>();
  const float *bias = ctx.has(2) ? ctx.in(2).as<const float>() : nullptr;
  float *y = out->as<float>();
  if (out->numel() == 0)
    return absl::OkStatus();
  int64_t columns = g.columns(), filters = g.groupFilters();
  int64_t rows = g.batch * g.outputSize;
  ThreadPool &pool = ctx.pool();

  if (g.readsInputAsIs()) {
    // y [N, M] = x [N, C * K] w^T [C * K, M].
    parallelSgemm(pool, false, true, g.batch, g.filters, columns, 1.0f, x,
                  columns, w, columns, 0.0f, y, g.filters);
  } else {
    // Chunks of rows of col; each chunk's product [rows, M / group] goes to
    // y directly when every batch element has one output position (y is
    // then [N, M]), else through `product`, transposed into [N, M, O].
    int64_t chunk = std::clamp<int64_t>(
        kMaxColumnChunk / std::max<int64_t>(1, columns), 1, rows);
    std::vector<float> col(chunk * columns);
    std::vector<float> product(g.outputSize == 1 ? 0 : chunk * filters);
    for (int64_t gi = 0; gi < g.group; ++gi) {
      const float *wg = w + gi * filters * columns;
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t r1 = std::min(rows, r0 + chunk);
        pool.parallelFor(r1 - r0, rowGrain(columns), [&](int64_t a, int64_t b) {
          fillColumns(g, gi, x, r0 + a, r0 + b, col.data() + a * columns);
        });
        if (g.outputSize == 1) {
          parallelSgemm(pool, false, true, r1 - r0, filters, columns, 1.0f,
                        col.data(), columns, wg, columns, 0.0f,
                        y + r0 * g.filters + gi * filters, g.filters);
          continue;
        }
        parallelSgemm(pool, false, true, r1 - r0, filters, columns, 1.0f,
                      col.data(), columns, wg, columns, 0.0f, product.data(),
                      filters);
        for (int64_t r = r0; r < r1; ++r) {
          int64_t n = r / g.outputSize, o = r % g.outputSize;
          const float *src = product.data() + (r - r0) * filters;
          float *dst = y + (n * g.filters + gi * filters) * g.outputSize + o;
          for (int64_t m = 0; m < filters; ++m)
            dst[m * g.outputSize] = src[m];
        }
      }
    }
  }
  if (bias) {
    int64_t planes = g.batch * g.filters;
    pool.parallelFor(planes, rowGrain(g.outputSize),
                     [&](int64_t p0, int64_t p1) {
                       for (int64_t p = p0; p < p1; ++p) {
                         float add = bias[p % g.filters];
                         float *plane = y + p * g.outputSize;
                         for (int64_t o = 0; o < g.outputSize; ++o)
                           plane[o] += add;
                       }
                     });
  }
  return absl::OkStatus();
}

absl::Status validateConv(const StepCheck &check) {
  for (int i = 0; i < 3; ++i)
    MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  int rank = check.in(0).rank;
  if (rank < 3)
    return check.error("input has rank ", rank,
                       "; expected [N, C, D1, ...] with a spatial axis");
  MOERT_RETURN_IF_ERROR(check.inRank(1, rank));
  MOERT_RETURN_IF_ERROR(check.outRank(0, rank));
  if (check.has(2) && check.in(2).rank != 1)
    return check.error("bias has rank ", check.in(2).rank, "; expected 1");
  const auto *attrs = check.attrs<fb::ConvAttrs>();
  int spatial = rank - 2;
  auto checkList = [&](const flatbuffers::Vector<int64_t> *list,
                       const char *what, int count,
                       int64_t least) -> absl::Status {
    if (!list || list->size() == 0)
      return absl::OkStatus();
    if (static_cast<int>(list->size()) != count)
      return check.error(what, " has ", list->size(), " entries; expected ",
                         count);
    for (int64_t value : *list)
      if (value < least)
        return check.error(what, " holds ", value, "; expected >= ", least);
    return absl::OkStatus();
  };
  MOERT_RETURN_IF_ERROR(checkList(attrs->strides(), "strides", spatial, 1));
  MOERT_RETURN_IF_ERROR(checkList(attrs->dilations(), "dilations", spatial, 1));
  MOERT_RETURN_IF_ERROR(checkList(attrs->pads(), "pads", 2 * spatial, 0));
  if (attrs->group() < 1)
    return check.error("group ", attrs->group(), " is not positive");
  if (attrs->auto_pad() > fb::AutoPad::MAX)
    return check.error("unknown auto_pad ",
                       static_cast<int>(attrs->auto_pad()));
  return absl::OkStatus();
}

} // namespace

void registerConvOps(OpRegistry &r) {
  OpDef conv =
      makeOp("Conv", 2, 3, validateConv, convKernel, fb::Attrs::ConvAttrs);
  conv.optionalInputs = 0b100;
  r.add(fb::OpKind::Conv, conv);
}

} // namespace moert::detail
