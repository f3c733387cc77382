//===- shape.cpp - Shape manipulation and data movement kernels -----------===//
//
// Reshape, Flatten, Squeeze, Unsqueeze, Identity (copies, or nothing when the
// plan runs them in place), Transpose, Concat, Split, Slice, Expand, Tile;
// the ops that make shapes, masks and indices are in shape_values.cpp. Data
// movement dispatches on the element size only.
//
//===----------------------------------------------------------------------===//

#include "kernels/common.h"
#include "kernels/shape_plan.h"

#include "absl/strings/str_join.h"

#include <vector>

namespace moert::detail {
namespace {

//===----------------------------------------------------------------------===//
// Reshape, Flatten, Squeeze, Unsqueeze, Identity
//===----------------------------------------------------------------------===//

absl::StatusOr<Shape> reshapeShape(const KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  std::vector<int64_t> spec;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 1, "shape", spec));
  if (spec.size() > static_cast<size_t>(kMaxRank))
    return ctx.error("shape has ", spec.size(), " dims; at most ", kMaxRank,
                     " are supported");
  bool allowZero = ctx.attrs<fb::ReshapeAttrs>()->allowzero();
  Shape shape;
  int inferred = -1;
  int64_t known = 1;
  for (size_t d = 0; d < spec.size(); ++d) {
    int64_t size = spec[d];
    if (size == 0 && !allowZero) {
      if (static_cast<int>(d) >= in.shape.rank)
        return ctx.error("shape dim ", d, " is 0 (copy) but the input has ",
                         "rank ", in.shape.rank);
      size = in.shape[d];
    } else if (size == -1) {
      if (inferred >= 0)
        return ctx.error("shape ", absl::StrJoin(spec, ","),
                         " has more than one -1");
      inferred = static_cast<int>(d);
      shape.push(1);
      continue;
    } else if (size < 0) {
      return ctx.error("shape dim ", d, " is ", size);
    }
    if (!checkedMul(known, size, known))
      return ctx.error("shape ", absl::StrJoin(spec, ","), " overflows");
    shape.push(size);
  }
  if (inferred >= 0 && known == 0 && in.numel() == 0) {
    // Any size fits 0 elements (a device whose share of the batch is
    // empty): take the size the plan fixes for that dim, else 0.
    const TensorInfo &out = ctx.declared(0);
    shape[inferred] =
        inferred < out.rank && out.dims[inferred].kind != fb::DimKind::Dynamic
            ? ctx.plannedDim(0, inferred)
            : 0;
  } else if (inferred >= 0) {
    if (known == 0 || in.numel() % known != 0)
      return ctx.error("cannot infer the -1 dim of shape ",
                       absl::StrJoin(spec, ","), " for ", in.numel(),
                       " elements");
    shape[inferred] = in.numel() / known;
  }
  return shape;
}

absl::Status validateReshape(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  return check.outMatchesIn(0, 0);
}

absl::StatusOr<Shape> flattenShape(const KernelContext &ctx) {
  const Shape &in = ctx.in(0).shape;
  int64_t axis = ctx.attrs<fb::AxisAttrs>()->axis();
  if (axis < 0)
    axis += in.rank;
  if (axis < 0 || axis > in.rank)
    return ctx.error("axis ", ctx.attrs<fb::AxisAttrs>()->axis(),
                     " is out of range for rank ", in.rank);
  int a = static_cast<int>(axis);
  return Shape{in.span(0, a), in.span(a, in.rank)};
}

absl::Status validateFlatten(const StepCheck &check) {
  int rank = check.in(0).rank;
  int64_t axis = check.attrs<fb::AxisAttrs>()->axis();
  if (axis < -rank || axis > rank)
    return check.error("axis ", axis, " is out of range for rank ", rank);
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, 2);
}

absl::StatusOr<Shape> squeezeShape(const KernelContext &ctx) {
  const Shape &in = ctx.in(0).shape;
  std::vector<int64_t> axes;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 1, "axes", axes));
  MOERT_RETURN_IF_ERROR(normalizeAxes(ctx, axes, in.rank, "axis"));
  bool drop[kMaxRank] = {};
  for (int64_t axis : axes) {
    if (in[axis] != 1)
      return ctx.error("cannot squeeze axis ", axis, " of size ", in[axis],
                       " in ", in.str());
    drop[axis] = true;
  }
  Shape shape;
  for (int d = 0; d < in.rank; ++d)
    if (!(axes.empty() ? in[d] == 1 : drop[d]))
      shape.push(in[d]);
  return shape;
}

absl::StatusOr<Shape> unsqueezeShape(const KernelContext &ctx) {
  const Shape &in = ctx.in(0).shape;
  std::vector<int64_t> axes;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 1, "axes", axes));
  int rank = in.rank + static_cast<int>(axes.size());
  if (rank > kMaxRank)
    return ctx.error("result rank ", rank, " exceeds ", kMaxRank);
  MOERT_RETURN_IF_ERROR(normalizeAxes(ctx, axes, rank, "axis"));
  bool insert[kMaxRank] = {};
  for (int64_t axis : axes)
    insert[axis] = true;
  Shape shape;
  for (int d = 0, k = 0; d < rank; ++d)
    shape.push(insert[d] ? 1 : in[k++]);
  return shape;
}

absl::Status validateAxesView(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  // A scalar is one axis: onnxruntime reads Unsqueeze's axes so (and moec
  // imports them so).
  if (check.has(1) && check.in(1).rank > 1)
    return check.error("axes (input 1) has rank ", check.in(1).rank,
                       "; expected a scalar or 1-D");
  return check.outMatchesIn(0, 0);
}

/// Reshape, Flatten, Squeeze, Unsqueeze, Identity: a copy of input 0's
/// bytes in the planned shape (nothing when the plan runs it in place).
absl::Status viewKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Shape shape, viewShape(ctx));
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  copyBytes(out->data, in.data, in.bytes());
  return absl::OkStatus();
}

absl::Status validateIdentity(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, check.in(0).rank);
}

//===----------------------------------------------------------------------===//
// Transpose, Slice: strided copies
//===----------------------------------------------------------------------===//

/// out[i0..in] = in[offset + sum(i_d * strides[d])] over `shape`, in parallel
/// over rows of the innermost dimension.
void stridedCopy(ThreadPool &pool, size_t elementSize, const Shape &shape,
                 const int64_t *strides, int64_t offset, const uint8_t *src,
                 uint8_t *dst) {
  int rank = shape.rank;
  if (shape.numel() == 0)
    return;
  if (rank == 0) {
    std::memcpy(dst, src + offset * elementSize, elementSize);
    return;
  }
  int64_t inner = shape[rank - 1];
  int64_t innerStride = strides[rank - 1];
  int64_t rows = shape.numel() / inner;
  dispatchBySize(elementSize, [&](auto tag) {
    using T = decltype(tag);
    const T *in = reinterpret_cast<const T *>(src) + offset;
    T *out = reinterpret_cast<T *>(dst);
    pool.parallelFor(rows, std::max<int64_t>(1, kElementwiseGrain / inner),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t row = begin; row < end; ++row) {
                         int64_t base = 0, rest = row;
                         for (int d = rank - 2; d >= 0; --d) {
                           base += (rest % shape[d]) * strides[d];
                           rest /= shape[d];
                         }
                         const T *p = in + base;
                         T *q = out + row * inner;
                         if (innerStride == 1)
                           std::copy(p, p + inner, q);
                         else
                           for (int64_t i = 0; i < inner; ++i)
                             q[i] = p[i * innerStride];
                       }
                     });
  });
}

/// The permutation (empty attribute: reversed dims), checked for `rank`.
bool transposePerm(const fb::TransposeAttrs *attrs, int rank, int *perm) {
  const auto *values = attrs->perm();
  if (!values || values->size() == 0) {
    for (int d = 0; d < rank; ++d)
      perm[d] = rank - 1 - d;
    return true;
  }
  if (static_cast<int>(values->size()) != rank)
    return false;
  bool seen[kMaxRank] = {};
  for (int d = 0; d < rank; ++d) {
    int64_t p = values->Get(d);
    if (p < 0 || p >= rank || seen[p])
      return false;
    seen[p] = true;
    perm[d] = static_cast<int>(p);
  }
  return true;
}

absl::Status transposeKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(StridedRead read, transposeRead(ctx));
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, read.shape));
  stridedCopy(ctx.pool(), dtypeSize(in.dtype), read.shape, read.strides, 0,
              in.data, out->data);
  return absl::OkStatus();
}

absl::Status validateTranspose(const StepCheck &check) {
  int perm[kMaxRank];
  int rank = check.in(0).rank;
  if (!transposePerm(check.attrs<fb::TransposeAttrs>(), rank, perm))
    return check.error("perm is not a permutation of ", rank, " dims");
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, rank);
}

absl::Status sliceKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(StridedRead read, sliceRead(ctx));
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, read.shape));
  if (out->numel() > 0)
    stridedCopy(ctx.pool(), dtypeSize(in.dtype), read.shape, read.strides,
                read.offset, in.data, out->data);
  return absl::OkStatus();
}

absl::StatusOr<StridedRead> sliceReadImpl(const KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  int rank = in.shape.rank;
  std::vector<int64_t> starts, ends, axes, steps;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 1, "starts", starts));
  MOERT_RETURN_IF_ERROR(listInput(ctx, 2, "ends", ends));
  MOERT_RETURN_IF_ERROR(listInput(ctx, 3, "axes", axes));
  MOERT_RETURN_IF_ERROR(listInput(ctx, 4, "steps", steps));
  if (ends.size() != starts.size() ||
      (ctx.has(3) && axes.size() != starts.size()) ||
      (ctx.has(4) && steps.size() != starts.size()))
    return ctx.error("starts, ends, axes and steps differ in length");
  if (!ctx.has(3))
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(static_cast<int64_t>(k));
  MOERT_RETURN_IF_ERROR(normalizeAxes(ctx, axes, rank, "axis"));
  int64_t begin[kMaxRank], step[kMaxRank];
  Shape shape = in.shape;
  for (int d = 0; d < rank; ++d) {
    begin[d] = 0;
    step[d] = 1;
  }
  for (size_t k = 0; k < starts.size(); ++k) {
    int d = static_cast<int>(axes[k]);
    int64_t dim = in.shape[d];
    int64_t s = starts[k], e = ends[k];
    int64_t st = ctx.has(4) ? steps[k] : 1;
    if (st == 0)
      return ctx.error("step of axis ", d, " is 0");
    // A step longer than the dim selects at most one element either way.
    st = std::clamp<int64_t>(st, -dim - 1, dim + 1);
    if (s < 0)
      s += dim;
    if (e < 0)
      e += dim;
    int64_t count;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      count = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      count = s > e ? (s - e - st - 1) / -st : 0;
    }
    begin[d] = s;
    step[d] = st;
    shape[d] = count;
  }
  StridedRead read;
  read.shape = shape;
  int64_t inStrides[kMaxRank];
  contiguousStrides(in.shape, inStrides);
  for (int d = 0; d < rank; ++d) {
    read.offset += begin[d] * inStrides[d];
    read.strides[d] = step[d] * inStrides[d];
  }
  return read;
}

absl::Status validateSlice(const StepCheck &check) {
  for (int i = 1; i < 5; ++i) {
    MOERT_RETURN_IF_ERROR(check.inType(i, kIndexTypes));
    MOERT_RETURN_IF_ERROR(check.inRank(i, 1));
  }
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, check.in(0).rank);
}

//===----------------------------------------------------------------------===//
// Concat, Split
//===----------------------------------------------------------------------===//

absl::StatusOr<Shape> concatShapeImpl(const KernelContext &ctx, int &axis) {
  const Tensor &first = ctx.in(0);
  int rank = first.shape.rank;
  MOERT_ASSIGN_OR_RETURN(axis,
                         ctx.axis(ctx.attrs<fb::AxisAttrs>()->axis(), rank));
  Shape shape = first.shape;
  shape[axis] = 0;
  for (int i = 0; i < ctx.numInputs(); ++i) {
    const Shape &s = ctx.in(i).shape;
    for (int d = 0; d < rank; ++d)
      if (d != axis && s[d] != first.shape[d])
        return ctx.error("input ", i, " of shape ", s.str(),
                         " does not match input 0 of shape ", first.shape.str(),
                         " outside axis ", axis);
    shape[axis] += s[axis];
  }
  return shape;
}

absl::Status concatKernel(KernelContext &ctx) {
  const Tensor &first = ctx.in(0);
  int rank = first.shape.rank;
  int axis = 0;
  MOERT_ASSIGN_OR_RETURN(Shape shape, concatShapeImpl(ctx, axis));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  size_t elementSize = dtypeSize(first.dtype);
  int64_t outer = shape.span(0, axis);
  int64_t innerBytes = shape.span(axis + 1, rank) * elementSize;
  int64_t rowBytes = shape[axis] * innerBytes;
  int64_t column = 0;
  int begin = 0;
  if (out->isCacheView() || first.isCacheView()) {
    // Appending to a KV cache written in place (kv_cache_in_place.h): the past
    // is already the first positions of the output, which has room for
    // cachePitch of them; only the new positions are written.
    if (!out->isCacheView() || !first.isCacheView() ||
        first.data != out->data || first.cacheAxis != axis ||
        out->cacheAxis != axis || first.cachePitch != out->cachePitch)
      return ctx.error("a KV cache view reaches a Concat that does not "
                       "append to it along its axis");
    rowBytes = out->cachePitch * innerBytes;
    column = first.shape[axis] * innerBytes;
    begin = 1;
  }
  for (int i = begin; i < ctx.numInputs(); ++i) {
    const Tensor &t = ctx.in(i);
    if (t.isCacheView())
      return ctx.error("input ", i, " is a KV cache view");
    int64_t bytes = t.shape[axis] * innerBytes;
    for (int64_t o = 0; o < outer && bytes > 0; ++o)
      std::memcpy(out->data + o * rowBytes + column, t.data + o * bytes, bytes);
    column += bytes;
  }
  return absl::OkStatus();
}

absl::Status validateConcat(const StepCheck &check) {
  int rank = check.in(0).rank;
  MOERT_RETURN_IF_ERROR(
      check.axis(check.attrs<fb::AxisAttrs>()->axis(), rank).status());
  for (int i = 1; i < check.numInputs(); ++i) {
    MOERT_RETURN_IF_ERROR(check.sameInTypes(0, i));
    MOERT_RETURN_IF_ERROR(check.inRank(i, rank));
  }
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, rank);
}

absl::Status splitKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::SplitAttrs>();
  const Tensor &in = ctx.in(0);
  int rank = in.shape.rank;
  MOERT_ASSIGN_OR_RETURN(int axis, ctx.axis(attrs->axis(), rank));
  int parts = ctx.numOutputs();
  int64_t dim = in.shape[axis];
  std::vector<int64_t> sizes;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 1, "split", sizes));
  if (ctx.has(1)) {
    if (static_cast<int>(sizes.size()) != parts)
      return ctx.error("split has ", sizes.size(), " sizes for ", parts,
                       " outputs");
    int64_t total = 0;
    for (int64_t size : sizes) {
      if (size < 0 || __builtin_add_overflow(total, size, &total))
        return ctx.error("split sizes ", absl::StrJoin(sizes, ","),
                         " are invalid");
    }
    if (total != dim)
      return ctx.error("split sizes ", absl::StrJoin(sizes, ","), " sum to ",
                       total, ", not the axis size ", dim);
  } else {
    // Equal parts of ceil(dim / parts), the last one smaller (opset 18).
    int64_t chunk = (dim + parts - 1) / parts;
    for (int p = 0; p < parts; ++p)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - chunk * p)));
  }
  size_t elementSize = dtypeSize(in.dtype);
  int64_t outer = in.shape.span(0, axis);
  int64_t innerBytes = in.shape.span(axis + 1, rank) * elementSize;
  int64_t rowBytes = dim * innerBytes;
  int64_t column = 0;
  for (int p = 0; p < parts; ++p) {
    Shape shape = in.shape;
    shape[axis] = sizes[p];
    MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(p, shape));
    int64_t bytes = sizes[p] * innerBytes;
    for (int64_t o = 0; o < outer && bytes > 0; ++o)
      std::memcpy(out->data + o * bytes, in.data + o * rowBytes + column,
                  bytes);
    column += bytes;
  }
  return absl::OkStatus();
}

absl::Status validateSplit(const StepCheck &check) {
  const auto *attrs = check.attrs<fb::SplitAttrs>();
  int rank = check.in(0).rank;
  MOERT_RETURN_IF_ERROR(check.axis(attrs->axis(), rank).status());
  if (attrs->num_outputs() != 0 && attrs->num_outputs() != check.numOutputs())
    return check.error("num_outputs is ", attrs->num_outputs(), " but the ",
                       "step has ", check.numOutputs(), " outputs");
  if (attrs->num_outputs() != 0 && check.has(1))
    return check.error("num_outputs and the split input are exclusive");
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  for (int o = 0; o < check.numOutputs(); ++o) {
    MOERT_RETURN_IF_ERROR(check.outMatchesIn(o, 0));
    MOERT_RETURN_IF_ERROR(check.outRank(o, rank));
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Expand, Tile
//===----------------------------------------------------------------------===//

absl::StatusOr<Shape> expandShapeImpl(const KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  std::vector<int64_t> dims;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 1, "shape", dims));
  if (dims.size() > static_cast<size_t>(kMaxRank))
    return ctx.error("shape has ", dims.size(), " dims; at most ", kMaxRank);
  Shape target;
  for (int64_t d : dims) {
    if (d < 0)
      return ctx.error("shape ", absl::StrJoin(dims, ","),
                       " has a negative dim");
    target.push(d);
  }
  Shape shape;
  const Shape *shapes[] = {&in.shape, &target};
  MOERT_RETURN_IF_ERROR(broadcastOrError(ctx, shapes, 2, shape));
  return shape;
}

absl::Status expandKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(Shape shape, expandShapeImpl(ctx));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  const Shape *src[] = {&in.shape};
  BroadcastLoop loop(shape, src, 1);
  int64_t stride = loop.innerStride(0);
  dispatchBySize(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = in.as<const T>();
    T *y = out->as<T>();
    ctx.pool().parallelFor(
        shape.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
          loop.forEachRun(b, e, [&](int64_t o, const int64_t *offs, int64_t n) {
            for (int64_t i = 0; i < n; ++i)
              y[o + i] = x[offs[0] + i * stride];
          });
        });
  });
  return absl::OkStatus();
}

absl::Status validateExpand(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  return check.outMatchesIn(0, 0);
}

absl::Status tileKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  int rank = in.shape.rank;
  std::vector<int64_t> repeats;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 1, "repeats", repeats));
  if (static_cast<int>(repeats.size()) != rank)
    return ctx.error("repeats has ", repeats.size(), " values for rank ", rank);
  Shape shape;
  for (int d = 0; d < rank; ++d) {
    int64_t size;
    if (!checkedMul(in.shape[d], repeats[d], size))
      return ctx.error("repeats ", absl::StrJoin(repeats, ","),
                       " are invalid for ", in.shape.str());
    shape.push(size);
  }
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  if (out->numel() == 0)
    return absl::OkStatus();
  if (rank == 0) {
    copyBytes(out->data, in.data, in.bytes());
    return absl::OkStatus();
  }
  int64_t strides[kMaxRank];
  contiguousStrides(in.shape, strides);
  int64_t inner = shape[rank - 1], innerIn = in.shape[rank - 1];
  int64_t rows = shape.numel() / inner;
  dispatchBySize(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = in.as<const T>();
    T *y = out->as<T>();
    ctx.pool().parallelFor(
        rows, std::max<int64_t>(1, kElementwiseGrain / inner),
        [&](int64_t b, int64_t e) {
          for (int64_t row = b; row < e; ++row) {
            int64_t base = 0, rest = row;
            for (int d = rank - 2; d >= 0; --d) {
              base += (rest % shape[d]) % in.shape[d] * strides[d];
              rest /= shape[d];
            }
            T *q = y + row * inner;
            for (int64_t i = 0; i < inner; ++i)
              q[i] = x[base + i % innerIn];
          }
        });
  });
  return absl::OkStatus();
}

absl::Status validateTile(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, check.in(0).rank);
}

} // namespace

absl::StatusOr<Shape> viewShape(const KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  absl::StatusOr<Shape> shape;
  switch (ctx.step().op) {
  case fb::OpKind::Reshape:
    shape = reshapeShape(ctx);
    break;
  case fb::OpKind::Flatten:
    shape = flattenShape(ctx);
    break;
  case fb::OpKind::Squeeze:
    shape = squeezeShape(ctx);
    break;
  case fb::OpKind::Unsqueeze:
    shape = unsqueezeShape(ctx);
    break;
  case fb::OpKind::Identity:
    shape = in.shape;
    break;
  default:
    return ctx.error("is not a view step");
  }
  if (shape.ok() && shape->numel() != in.numel())
    return ctx.error("cannot view ", in.shape.str(), " (", in.numel(),
                     " elements) as ", shape->str());
  return shape;
}

absl::StatusOr<StridedRead> transposeRead(const KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  int perm[kMaxRank];
  if (!transposePerm(ctx.attrs<fb::TransposeAttrs>(), in.shape.rank, perm))
    return ctx.error("perm is not a permutation of ", in.shape.rank, " dims");
  int64_t inStrides[kMaxRank];
  contiguousStrides(in.shape, inStrides);
  StridedRead read;
  for (int d = 0; d < in.shape.rank; ++d) {
    read.shape.push(in.shape[perm[d]]);
    read.strides[d] = inStrides[perm[d]];
  }
  return read;
}

absl::StatusOr<StridedRead> sliceRead(const KernelContext &ctx) {
  return sliceReadImpl(ctx);
}

absl::StatusOr<Shape> concatShape(const KernelContext &ctx, int &axis) {
  return concatShapeImpl(ctx, axis);
}

absl::StatusOr<Shape> expandShape(const KernelContext &ctx) {
  return expandShapeImpl(ctx);
}

void registerShapeOps(OpRegistry &r) {
  auto view = [&](fb::OpKind kind, OpDef def) {
    def.inPlaceInputs = kInPlaceFirst;
    r.add(kind, def);
  };
  view(fb::OpKind::Reshape, makeOp("Reshape", 2, 2, validateReshape, viewKernel,
                                   fb::Attrs::ReshapeAttrs));
  view(fb::OpKind::Flatten, makeOp("Flatten", 1, 1, validateFlatten, viewKernel,
                                   fb::Attrs::AxisAttrs));
  OpDef squeeze = makeOp("Squeeze", 1, 2, validateAxesView, viewKernel);
  squeeze.optionalInputs = 0b10;
  view(fb::OpKind::Squeeze, squeeze);
  view(fb::OpKind::Unsqueeze,
       makeOp("Unsqueeze", 2, 2, validateAxesView, viewKernel));
  view(fb::OpKind::Identity,
       makeOp("Identity", 1, 1, validateIdentity, viewKernel));
  r.add(fb::OpKind::Transpose,
        makeOp("Transpose", 1, 1, validateTranspose, transposeKernel,
               fb::Attrs::TransposeAttrs));
  OpDef slice = makeOp("Slice", 3, 5, validateSlice, sliceKernel);
  slice.optionalInputs = 0b11000;
  r.add(fb::OpKind::Slice, slice);
  r.add(fb::OpKind::Concat, makeOp("Concat", 1, kVariadic, validateConcat,
                                   concatKernel, fb::Attrs::AxisAttrs));
  OpDef split =
      makeOp("Split", 1, 2, validateSplit, splitKernel, fb::Attrs::SplitAttrs);
  split.optionalInputs = 0b10;
  split.maxOutputs = kVariadic;
  r.add(fb::OpKind::Split, split);
  r.add(fb::OpKind::Expand,
        makeOp("Expand", 2, 2, validateExpand, expandKernel));
  r.add(fb::OpKind::Tile, makeOp("Tile", 2, 2, validateTile, tileKernel));
  registerShapeValueOps(r);
}

} // namespace moert::detail
