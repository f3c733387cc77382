//===- indexing.cpp - Gather and scatter kernels --------------------------===//
//
// Gather, GatherElements, GatherND, ScatterElements, ScatterND. Every index
// is range-checked (negative ones count from the end) before any memory is
// touched; a bad index is an error naming its position, never an
// out-of-bounds access.
//
//===----------------------------------------------------------------------===//

#include "kernels/common.h"
#include "kernels/shape_plan.h"
#include "kernels/stream.h"

#include <vector>

namespace moert::detail {
namespace {

/// Checks every index of `indices` against [-dim, dim) and returns them
/// normalised to [0, dim).
absl::Status normalizedIndices(const KernelContext &ctx, const Tensor &indices,
                               int64_t dim, std::vector<int64_t> &out) {
  int64_t n = indices.numel();
  out.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t index = readIndex(indices, i);
    if (index < -dim || index >= dim)
      return ctx.error("index ", index, " at position ", i,
                       " is out of range for a dimension of size ", dim);
    out[i] = index < 0 ? index + dim : index;
  }
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

absl::Status gatherKernel(KernelContext &ctx) {
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  int rank = data.shape.rank;
  int axis = 0;
  MOERT_ASSIGN_OR_RETURN(Shape shape, gatherShape(ctx, axis));
  std::vector<int64_t> index;
  MOERT_RETURN_IF_ERROR(
      normalizedIndices(ctx, indices, data.shape[axis], index));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  int64_t outer = data.shape.span(0, axis);
  int64_t dim = data.shape[axis];
  int64_t count = static_cast<int64_t>(index.size());
  if (out->dtype != data.dtype) {
    // A bf16 or f16 table widened to f32 (format 1.19), exactly.
    int64_t block = data.shape.span(axis + 1, rank);
    StreamWeights type =
        data.dtype == DType::BF16 ? StreamWeights::BF16 : StreamWeights::F16;
    size_t width = dtypeSize(data.dtype);
    float *y = out->as<float>();
    ctx.pool().parallelFor(
        outer * count,
        std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(block, 1)),
        [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) {
            int64_t o = k / count, j = k % count;
            widenWeights(data.data + (o * dim + index[j]) * block * width, type,
                         block, y + k * block);
          }
        });
    return absl::OkStatus();
  }
  size_t blockBytes = data.shape.span(axis + 1, rank) * dtypeSize(data.dtype);
  ctx.pool().parallelFor(
      outer * count,
      std::max<int64_t>(1, kElementwiseGrain * 4 /
                               std::max<int64_t>(blockBytes, 1)),
      [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          int64_t o = k / count, j = k % count;
          std::memcpy(out->data + k * blockBytes,
                      data.data + (o * dim + index[j]) * blockBytes,
                      blockBytes);
        }
      });
  return absl::OkStatus();
}

absl::Status validateGather(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, kIndexTypes));
  // A narrowed embedding: a bf16 or f16 weight table read into f32.
  bool widening =
      check.out(0).dtype == DType::F32 &&
      (check.in(0).dtype == DType::BF16 || check.in(0).dtype == DType::F16);
  if (widening && !check.in(0).isWeight)
    return check.error("a Gather widens only a weight table to f32; data is ",
                       dtypeName(check.in(0).dtype));
  if (!widening)
    MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  int rank = check.in(0).rank;
  MOERT_RETURN_IF_ERROR(
      check.axis(check.attrs<fb::AxisAttrs>()->axis(), rank).status());
  return check.outRank(0, rank - 1 + check.in(1).rank);
}

//===----------------------------------------------------------------------===//
// GatherElements, ScatterElements
//===----------------------------------------------------------------------===//

/// For every element of `indices` (same rank as data, each dim within the
/// data's outside `axis`), calls fn(position, dataOffset).
template <typename Fn>
absl::Status forEachElementIndex(const KernelContext &ctx, const Shape &data,
                                 const Tensor &indices, int axis, Fn &&fn) {
  const Shape &shape = indices.shape;
  MOERT_RETURN_IF_ERROR(checkElementIndices(ctx, data, shape, axis));
  int64_t strides[kMaxRank];
  contiguousStrides(data, strides);
  int64_t n = indices.numel();
  int64_t dim = data[axis];
  int64_t position[kMaxRank] = {};
  for (int64_t i = 0; i < n; ++i) {
    int64_t index = readIndex(indices, i);
    if (index < -dim || index >= dim)
      return ctx.error("index ", index, " at position ", i,
                       " is out of range for axis ", axis, " of size ", dim);
    if (index < 0)
      index += dim;
    int64_t offset = 0;
    for (int d = 0; d < data.rank; ++d)
      offset += (d == axis ? index : position[d]) * strides[d];
    fn(i, offset);
    for (int d = data.rank - 1; d >= 0; --d) {
      if (++position[d] < shape[d])
        break;
      position[d] = 0;
    }
  }
  return absl::OkStatus();
}

absl::Status gatherElementsKernel(KernelContext &ctx) {
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  MOERT_ASSIGN_OR_RETURN(
      int axis, ctx.axis(ctx.attrs<fb::AxisAttrs>()->axis(), data.shape.rank));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, indices.shape));
  size_t size = dtypeSize(data.dtype);
  return forEachElementIndex(
      ctx, data.shape, indices, axis, [&](int64_t i, int64_t offset) {
        std::memcpy(out->data + i * size, data.data + offset * size, size);
      });
}

absl::Status validateGatherElements(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, kIndexTypes));
  MOERT_RETURN_IF_ERROR(check.inRank(1, check.in(0).rank));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  int rank = check.in(0).rank;
  MOERT_RETURN_IF_ERROR(
      check.axis(check.attrs<fb::AxisAttrs>()->axis(), rank).status());
  return check.outRank(0, rank);
}

/// dst (reduce)= src for one element.
template <typename T>
void combine(fb::ScatterReduction reduction, T &dst, T src) {
  switch (reduction) {
  case fb::ScatterReduction::None:
    dst = src;
    break;
  case fb::ScatterReduction::Add:
    dst = wrapAdd(dst, src);
    break;
  case fb::ScatterReduction::Mul:
    dst = wrapMul(dst, src);
    break;
  case fb::ScatterReduction::Max:
    dst = nanMax(dst, src);
    break;
  case fb::ScatterReduction::Min:
    dst = nanMin(dst, src);
    break;
  }
}

/// Calls fn(T{}) for the element type of a scatter: numeric types, or bytes
/// of the element's size (reduction None only, checked at load).
template <typename Fn> void dispatchScatter(DType dtype, Fn &&fn) {
  if (!dispatchNumeric(dtype, fn))
    dispatchBySize(dtype, fn);
}

absl::Status scatterElementsKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::ScatterAttrs>();
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  const Tensor &updates = ctx.in(2);
  MOERT_ASSIGN_OR_RETURN(int axis, scatterElementsAxis(ctx));
  // Validate every index before the output (possibly data's slot) changes.
  MOERT_RETURN_IF_ERROR(forEachElementIndex(ctx, data.shape, indices, axis,
                                            [](int64_t, int64_t) {}));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, data.shape));
  copyBytes(out->data, data.data, data.bytes());
  fb::ScatterReduction reduction = attrs->reduction();
  absl::Status status;
  dispatchScatter(data.dtype, [&](auto tag) {
    using T = decltype(tag);
    T *y = out->as<T>();
    const T *u = updates.as<const T>();
    status = forEachElementIndex(ctx, data.shape, indices, axis,
                                 [&](int64_t i, int64_t offset) {
                                   combine(reduction, y[offset], u[i]);
                                 });
  });
  return status;
}

absl::Status validateScatter(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, kIndexTypes));
  MOERT_RETURN_IF_ERROR(check.sameInTypes(0, 2));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.outRank(0, check.in(0).rank));
  auto reduction = check.attrs<fb::ScatterAttrs>()->reduction();
  if (reduction > fb::ScatterReduction::MAX)
    return check.error("unknown reduction ", static_cast<int>(reduction));
  if (reduction != fb::ScatterReduction::None &&
      !(kNumericTypes & bit(check.in(0).dtype)))
    return check.error("reduction ", fb::EnumNameScatterReduction(reduction),
                       " needs a numeric dtype, not ",
                       dtypeName(check.in(0).dtype));
  return absl::OkStatus();
}

absl::Status validateScatterElements(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(validateScatter(check));
  int rank = check.in(0).rank;
  MOERT_RETURN_IF_ERROR(
      check.axis(check.attrs<fb::ScatterAttrs>()->axis(), rank).status());
  MOERT_RETURN_IF_ERROR(check.inRank(1, rank));
  return check.inRank(2, rank);
}

//===----------------------------------------------------------------------===//
// GatherND, ScatterND
//===----------------------------------------------------------------------===//

/// Resolves the index tuples of `indices` (last dim k) into element offsets
/// of slices of `data` after `batchDims` leading batch dims; `sliceSize` is
/// the element count of each slice.
absl::Status ndOffsets(const KernelContext &ctx, const Shape &data,
                       const Tensor &indices, int batchDims,
                       std::vector<int64_t> &offsets, int64_t &sliceSize) {
  const Shape &ishape = indices.shape;
  if (ishape.rank < 1)
    return ctx.error("indices must have rank >= 1");
  int64_t k = ishape[ishape.rank - 1];
  if (k < 1 || batchDims + k > data.rank)
    return ctx.error("index tuples of length ", k, " do not fit data of rank ",
                     data.rank, " after ", batchDims, " batch dims");
  for (int d = 0; d < batchDims; ++d)
    if (ishape[d] != data[d])
      return ctx.error("batch dim ", d, " differs: indices ", ishape.str(),
                       ", data ", data.str());
  int64_t strides[kMaxRank];
  contiguousStrides(data, strides);
  sliceSize = data.span(batchDims + static_cast<int>(k), data.rank);
  int64_t batches = data.span(0, batchDims);
  int64_t tuples = ishape.span(0, ishape.rank - 1);
  int64_t perBatch = batches ? tuples / batches : 0;
  int64_t batchStride = batchDims ? strides[batchDims - 1] : 0;
  offsets.resize(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = perBatch ? (t / perBatch) * batchStride : 0;
    for (int64_t j = 0; j < k; ++j) {
      int d = batchDims + static_cast<int>(j);
      int64_t index = readIndex(indices, t * k + j);
      if (index < -data[d] || index >= data[d])
        return ctx.error("index ", index, " in tuple ", t,
                         " is out of range for dim ", d, " of size ", data[d]);
      offset += (index < 0 ? index + data[d] : index) * strides[d];
    }
    offsets[t] = offset;
  }
  return absl::OkStatus();
}

absl::Status gatherNDKernel(KernelContext &ctx) {
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  int64_t batchDims = ctx.attrs<fb::GatherNDAttrs>()->batch_dims();
  if (batchDims < 0 ||
      batchDims >= std::min(data.shape.rank, indices.shape.rank))
    return ctx.error("batch_dims ", batchDims, " is out of range");
  std::vector<int64_t> offsets;
  int64_t sliceSize;
  MOERT_RETURN_IF_ERROR(ndOffsets(ctx, data.shape, indices,
                                  static_cast<int>(batchDims), offsets,
                                  sliceSize));
  Shape shape;
  for (int d = 0; d + 1 < indices.shape.rank; ++d)
    shape.push(indices.shape[d]);
  int k = static_cast<int>(indices.shape[indices.shape.rank - 1]);
  if (shape.rank + data.shape.rank - batchDims - k > kMaxRank)
    return ctx.error("result rank exceeds ", kMaxRank);
  for (int d = static_cast<int>(batchDims) + k; d < data.shape.rank; ++d)
    shape.push(data.shape[d]);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  size_t bytes = sliceSize * dtypeSize(data.dtype);
  size_t size = dtypeSize(data.dtype);
  for (size_t t = 0; t < offsets.size(); ++t)
    std::memcpy(out->data + t * bytes, data.data + offsets[t] * size, bytes);
  return absl::OkStatus();
}

absl::Status validateGatherND(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, kIndexTypes));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  int64_t batchDims = check.attrs<fb::GatherNDAttrs>()->batch_dims();
  if (batchDims < 0 ||
      batchDims >= std::min(check.in(0).rank, check.in(1).rank))
    return check.error("batch_dims ", batchDims, " is out of range");
  return absl::OkStatus();
}

absl::Status scatterNDKernel(KernelContext &ctx) {
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  const Tensor &updates = ctx.in(2);
  std::vector<int64_t> offsets;
  int64_t sliceSize;
  MOERT_RETURN_IF_ERROR(
      ndOffsets(ctx, data.shape, indices, 0, offsets, sliceSize));
  // updates = indices.shape[:-1] + data.shape[k:].
  Shape expected;
  for (int d = 0; d + 1 < indices.shape.rank; ++d)
    expected.push(indices.shape[d]);
  int k = static_cast<int>(indices.shape[indices.shape.rank - 1]);
  if (expected.rank + data.shape.rank - k > kMaxRank)
    return ctx.error("updates rank exceeds ", kMaxRank);
  for (int d = k; d < data.shape.rank; ++d)
    expected.push(data.shape[d]);
  if (updates.shape != expected)
    return ctx.error("updates have shape ", updates.shape.str(), "; expected ",
                     expected.str());
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, data.shape));
  copyBytes(out->data, data.data, data.bytes());
  fb::ScatterReduction reduction = ctx.attrs<fb::ScatterAttrs>()->reduction();
  dispatchScatter(data.dtype, [&](auto tag) {
    using T = decltype(tag);
    T *y = out->as<T>();
    const T *u = updates.as<const T>();
    for (size_t t = 0; t < offsets.size(); ++t)
      for (int64_t i = 0; i < sliceSize; ++i)
        combine(reduction, y[offsets[t] + i], u[t * sliceSize + i]);
  });
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<Shape> gatherShape(const KernelContext &ctx, int &axis) {
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  int rank = data.shape.rank;
  MOERT_ASSIGN_OR_RETURN(axis,
                         ctx.axis(ctx.attrs<fb::AxisAttrs>()->axis(), rank));
  if (rank - 1 + indices.shape.rank > kMaxRank)
    return ctx.error("result rank exceeds ", kMaxRank);
  Shape shape;
  for (int d = 0; d < axis; ++d)
    shape.push(data.shape[d]);
  for (int d = 0; d < indices.shape.rank; ++d)
    shape.push(indices.shape[d]);
  for (int d = axis + 1; d < rank; ++d)
    shape.push(data.shape[d]);
  return shape;
}

absl::Status checkElementIndices(const KernelContext &ctx, const Shape &data,
                                 const Shape &indices, int axis) {
  if (indices.rank != data.rank)
    return ctx.error("indices of shape ", indices.str(),
                     " must have the rank of data ", data.str());
  for (int d = 0; d < data.rank; ++d)
    if (d != axis && indices[d] > data[d])
      return ctx.error("indices of shape ", indices.str(),
                       " exceed data of shape ", data.str(), " in dim ", d);
  return absl::OkStatus();
}

absl::StatusOr<int> scatterElementsAxis(const KernelContext &ctx) {
  const Shape &data = ctx.in(0).shape;
  const Shape &indices = ctx.in(1).shape;
  const Shape &updates = ctx.in(2).shape;
  MOERT_ASSIGN_OR_RETURN(
      int axis, ctx.axis(ctx.attrs<fb::ScatterAttrs>()->axis(), data.rank));
  if (updates != indices)
    return ctx.error("updates of shape ", updates.str(),
                     " differ from indices of shape ", indices.str());
  MOERT_RETURN_IF_ERROR(checkElementIndices(ctx, data, indices, axis));
  return axis;
}

void registerIndexingOps(OpRegistry &r) {
  r.add(fb::OpKind::Gather, makeOp("Gather", 2, 2, validateGather, gatherKernel,
                                   fb::Attrs::AxisAttrs));
  r.add(fb::OpKind::GatherElements,
        makeOp("GatherElements", 2, 2, validateGatherElements,
               gatherElementsKernel, fb::Attrs::AxisAttrs));
  r.add(fb::OpKind::GatherND, makeOp("GatherND", 2, 2, validateGatherND,
                                     gatherNDKernel, fb::Attrs::GatherNDAttrs));
  OpDef scatterElements =
      makeOp("ScatterElements", 3, 3, validateScatterElements,
             scatterElementsKernel, fb::Attrs::ScatterAttrs);
  scatterElements.inPlaceInputs = kInPlaceFirst;
  r.add(fb::OpKind::ScatterElements, scatterElements);
  OpDef scatterND = makeOp("ScatterND", 3, 3, validateScatter, scatterNDKernel,
                           fb::Attrs::ScatterAttrs);
  scatterND.inPlaceInputs = kInPlaceFirst;
  r.add(fb::OpKind::ScatterND, scatterND);
}

} // namespace moert::detail
