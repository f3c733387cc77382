//===- shape_values.cpp - Kernels that make shapes, masks and indices -----===//
//
// Shape, Dim, Size, ConstantOfShape, Range (the shape values graphs compute
// at run time), Trilu, OneHot and NonZero (masks and indices); the data
// movement kernels are in shape.cpp, which registers these too.
//
//===----------------------------------------------------------------------===//

#include "kernels/common.h"
#include "kernels/shape_plan.h"

#include "absl/strings/str_join.h"

#include <vector>

namespace moert::detail {
namespace {

//===----------------------------------------------------------------------===//
// Shape, Size, ConstantOfShape, Range
//===----------------------------------------------------------------------===//

absl::Status shapeKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::ShapeAttrs>();
  const Shape &in = ctx.in(0).shape;
  auto clampIndex = [&](int64_t i) {
    if (i < 0)
      i += in.rank;
    return std::clamp<int64_t>(i, 0, in.rank);
  };
  int64_t start = clampIndex(attrs->start()), end = clampIndex(attrs->end());
  int64_t count = std::max<int64_t>(0, end - start);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, Shape{count}));
  for (int64_t i = 0; i < count; ++i)
    out->as<int64_t>()[i] = in[static_cast<int>(start + i)];
  return absl::OkStatus();
}

absl::Status validateShape(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::I64)));
  return check.outRank(0, 1);
}

absl::Status dimKernel(KernelContext &ctx) {
  const Shape &in = ctx.in(0).shape;
  int64_t axis = ctx.attrs<fb::AxisAttrs>()->axis();
  if (axis < 0)
    axis += in.rank;
  if (axis < 0 || axis >= in.rank)
    return ctx.error(
        absl::StrCat("dimension ", ctx.attrs<fb::AxisAttrs>()->axis(),
                     " is out of range for an input of rank ", in.rank));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, Shape{}));
  *out->as<int64_t>() = in[static_cast<int>(axis)];
  return absl::OkStatus();
}

absl::Status validateDim(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::I64)));
  return check.outRank(0, 0);
}

absl::Status sizeKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, Shape{}));
  *out->as<int64_t>() = ctx.in(0).numel();
  return absl::OkStatus();
}

absl::Status validateSize(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::I64)));
  return check.outRank(0, 0);
}

absl::StatusOr<Shape> constantOfShapeShapeImpl(const KernelContext &ctx) {
  std::vector<int64_t> dims;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 0, "shape", dims));
  if (dims.size() > static_cast<size_t>(kMaxRank))
    return ctx.error("shape has ", dims.size(), " dims; at most ", kMaxRank);
  Shape shape;
  for (int64_t d : dims) {
    if (d < 0)
      return ctx.error("shape ", absl::StrJoin(dims, ","),
                       " has a negative dim");
    shape.push(d);
  }
  return shape;
}

absl::Status constantOfShapeKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::ConstantOfShapeAttrs>();
  MOERT_ASSIGN_OR_RETURN(Shape shape, constantOfShapeShapeImpl(ctx));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  int64_t n = out->numel();
  switch (out->dtype) {
  case DType::F32:
    std::fill_n(out->as<float>(), n, attrs->float_value());
    break;
  case DType::I64:
    std::fill_n(out->as<int64_t>(), n, attrs->int_value());
    break;
  case DType::I32:
    std::fill_n(out->as<int32_t>(), n,
                static_cast<int32_t>(attrs->int_value()));
    break;
  case DType::Bool:
    std::fill_n(out->as<uint8_t>(), n, attrs->int_value() != 0);
    break;
  default:
    return ctx.error("unsupported dtype ", dtypeName(out->dtype));
  }
  return absl::OkStatus();
}

absl::Status validateConstantOfShape(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 1));
  auto dtype =
      static_cast<DType>(check.attrs<fb::ConstantOfShapeAttrs>()->dtype());
  DTypeSet allowed = kNumericTypes | bit(DType::Bool);
  if (!(allowed & bit(dtype)))
    return check.error("value dtype ", static_cast<int>(dtype),
                       " is not one of ", dtypeSetName(allowed));
  return check.outType(0, bit(dtype));
}

absl::Status rangeKernel(KernelContext &ctx) {
  for (int i = 0; i < 3; ++i)
    if (ctx.in(i).numel() != 1)
      return ctx.error("input ", i, " must have one element; it has shape ",
                       ctx.in(i).shape.str());
  absl::Status status;
  dispatchNumeric(ctx.in(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    T start = ctx.in(0).as<const T>()[0];
    T limit = ctx.in(1).as<const T>()[0];
    T delta = ctx.in(2).as<const T>()[0];
    if (delta == 0) {
      status = ctx.error("delta is 0");
      return;
    }
    int64_t count;
    if constexpr (std::is_floating_point_v<T>) {
      double n = std::ceil((double(limit) - double(start)) / double(delta));
      if (!(n < 9.0e18)) {
        status = ctx.error("the range has too many elements");
        return;
      }
      count = n > 0 ? static_cast<int64_t>(n) : 0;
    } else {
      __int128 span = static_cast<__int128>(limit) - start;
      __int128 n =
          span / delta + (span % delta != 0 && (span > 0) == (delta > 0));
      count = n > 0 ? (n > INT64_MAX ? INT64_MAX : static_cast<int64_t>(n)) : 0;
    }
    auto allocated = ctx.allocate(0, Shape{count});
    if (!allocated.ok()) {
      status = allocated.status();
      return;
    }
    T *out = (*allocated)->as<T>();
    for (int64_t i = 0; i < count; ++i)
      out[i] = wrapAdd(start, wrapMul(static_cast<T>(i), delta));
  });
  return status;
}

absl::Status validateRange(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  for (int i = 0; i < 3; ++i) {
    MOERT_RETURN_IF_ERROR(check.sameInTypes(0, i));
    MOERT_RETURN_IF_ERROR(check.inScalar(i));
  }
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, 1);
}

//===----------------------------------------------------------------------===//
// Trilu, OneHot, NonZero
//===----------------------------------------------------------------------===//

absl::Status triluKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  int64_t k = 0;
  if (ctx.has(1)) {
    MOERT_ASSIGN_OR_RETURN(k, scalarInput(ctx, 1, "k"));
  }
  bool upper = ctx.attrs<fb::TriluAttrs>()->upper();
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, in.shape));
  int rank = in.shape.rank;
  int64_t rows = in.shape[rank - 2], cols = in.shape[rank - 1];
  int64_t matrices = in.shape.span(0, rank - 2);
  dispatchBySize(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = in.as<const T>();
    T *y = out->as<T>();
    for (int64_t m = 0; m < matrices; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          int64_t at = (m * rows + i) * cols + j;
          // Keep j - i >= k (upper) or j - i <= k (lower); k may be huge.
          __int128 diagonal = static_cast<__int128>(j) - i;
          bool keep = upper ? diagonal >= k : diagonal <= k;
          y[at] = keep ? x[at] : T{};
        }
  });
  return absl::OkStatus();
}

absl::Status validateTrilu(const StepCheck &check) {
  if (check.in(0).rank < 2)
    return check.error("input must have rank >= 2");
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inScalar(1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, check.in(0).rank);
}

absl::Status oneHotKernel(KernelContext &ctx) {
  const Tensor &indices = ctx.in(0);
  const Tensor &values = ctx.in(2);
  if (values.numel() != 2)
    return ctx.error("values must have 2 elements (off, on); it has shape ",
                     values.shape.str());
  double rawDepth = 0;
  dispatchNumeric(ctx.in(1).dtype, [&](auto tag) {
    using T = decltype(tag);
    if (ctx.in(1).numel() == 1)
      rawDepth = static_cast<double>(ctx.in(1).as<const T>()[0]);
  });
  if (ctx.in(1).numel() != 1 || !(rawDepth >= 1) || rawDepth > 1e15)
    return ctx.error("depth must be one value >= 1");
  int64_t depth = static_cast<int64_t>(rawDepth);
  int rank = indices.shape.rank + 1;
  MOERT_ASSIGN_OR_RETURN(int axis,
                         ctx.axis(ctx.attrs<fb::AxisAttrs>()->axis(), rank));
  Shape shape;
  for (int d = 0, k = 0; d < rank; ++d)
    shape.push(d == axis ? depth : indices.shape[k++]);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  int64_t outer = indices.shape.span(0, axis);
  int64_t inner = indices.shape.span(axis, indices.shape.rank);
  dispatchBySize(values.dtype, [&](auto tag) {
    using T = decltype(tag);
    T off = values.as<const T>()[0], on = values.as<const T>()[1];
    T *y = out->as<T>();
    std::fill_n(y, out->numel(), off);
    dispatchNumeric(indices.dtype, [&](auto itag) {
      using I = decltype(itag);
      const I *x = indices.as<const I>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          double raw = static_cast<double>(x[o * inner + i]);
          if (std::isnan(raw))
            continue;
          if (raw < 0)
            raw += depth;
          if (raw < 0 || raw >= depth)
            continue; // Out of range: all off (onnxruntime).
          int64_t index = static_cast<int64_t>(raw);
          y[(o * depth + index) * inner + i] = on;
        }
    });
  });
  return absl::OkStatus();
}

absl::Status validateOneHot(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.inScalar(1));
  MOERT_RETURN_IF_ERROR(check.inRank(2, 1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 2));
  int rank = check.in(0).rank + 1;
  MOERT_RETURN_IF_ERROR(
      check.axis(check.attrs<fb::AxisAttrs>()->axis(), rank).status());
  return check.outRank(0, rank);
}

absl::Status nonZeroKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  // A scalar counts as a one-element vector (onnxruntime).
  Shape inShape = in.shape.rank == 0 ? Shape{1} : in.shape;
  int64_t n = in.numel();
  std::vector<int64_t> hits;
  auto collect = [&](auto tag) {
    using T = decltype(tag);
    const T *x = in.as<const T>();
    for (int64_t i = 0; i < n; ++i)
      if (x[i] != T(0))
        hits.push_back(i);
  };
  if (in.dtype == DType::Bool)
    collect(uint8_t{});
  else
    dispatchNumeric(in.dtype, collect);
  int64_t count = static_cast<int64_t>(hits.size());
  MOERT_ASSIGN_OR_RETURN(Tensor * out,
                         ctx.allocate(0, Shape{inShape.rank, count}));
  int64_t strides[kMaxRank];
  contiguousStrides(inShape, strides);
  int64_t *y = out->as<int64_t>();
  for (int64_t h = 0; h < count; ++h) {
    int64_t rest = hits[h];
    for (int d = 0; d < inShape.rank; ++d) {
      y[d * count + h] = rest / strides[d];
      rest %= strides[d];
    }
  }
  return absl::OkStatus();
}

absl::Status validateNonZero(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes | bit(DType::Bool)));
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::I64)));
  return check.outRank(0, 2);
}

} // namespace

absl::StatusOr<Shape> constantOfShapeShape(const KernelContext &ctx) {
  return constantOfShapeShapeImpl(ctx);
}

void registerShapeValueOps(OpRegistry &r) {
  r.add(fb::OpKind::Shape, makeOp("Shape", 1, 1, validateShape, shapeKernel,
                                  fb::Attrs::ShapeAttrs));
  r.add(fb::OpKind::Dim,
        makeOp("Dim", 1, 1, validateDim, dimKernel, fb::Attrs::AxisAttrs));
  r.add(fb::OpKind::Size, makeOp("Size", 1, 1, validateSize, sizeKernel));
  r.add(fb::OpKind::ConstantOfShape,
        makeOp("ConstantOfShape", 1, 1, validateConstantOfShape,
               constantOfShapeKernel, fb::Attrs::ConstantOfShapeAttrs));
  r.add(fb::OpKind::Range, makeOp("Range", 3, 3, validateRange, rangeKernel));
  OpDef trilu =
      makeOp("Trilu", 1, 2, validateTrilu, triluKernel, fb::Attrs::TriluAttrs);
  trilu.optionalInputs = 0b10;
  trilu.inPlaceInputs = kInPlaceFirst;
  r.add(fb::OpKind::Trilu, trilu);
  r.add(fb::OpKind::OneHot, makeOp("OneHot", 3, 3, validateOneHot, oneHotKernel,
                                   fb::Attrs::AxisAttrs));
  r.add(fb::OpKind::NonZero,
        makeOp("NonZero", 1, 1, validateNonZero, nonZeroKernel));
}

} // namespace moert::detail
