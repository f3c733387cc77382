//===- shape_plan.h - Output shapes of the data-movement kernels -*- C++
//-*-===//
//
// The shape half of the shape kernels (shape.cpp), of Gather,
// GatherElements and ScatterElements (indexing.cpp) and of ArgMax and TopK
// (reduction.cpp): each function checks a step's operands exactly as the CPU
// kernel does (same errors) and says what the output is, without touching
// the data. The CPU kernels then move the bytes themselves; the CUDA
// backend's data ops (runtime/src/backends/cuda/generic_ops.cpp) launch kernels
// instead, so both backends accept, reject and shape alike.
//
// Shape operands (Reshape's shape, Slice's starts, ...) are read from the
// host: the caller makes sure their host values are current.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_SHAPE_PLAN_H
#define MOERT_SRC_KERNELS_SHAPE_PLAN_H

#include "exec/ops.h"

#include <vector>

namespace moert::detail {

/// Output element i (row-major over `shape`) is input element
/// `offset + sum_d index_d(i) * strides[d]`.
struct StridedRead {
  Shape shape;
  int64_t strides[kMaxRank] = {};
  int64_t offset = 0;
};

/// The output shape of a view step (Reshape, Flatten, Squeeze, Unsqueeze,
/// Identity): the same elements as input 0 in another shape.
absl::StatusOr<Shape> viewShape(const KernelContext &ctx);

/// Transpose of input 0 by the step's perm.
absl::StatusOr<StridedRead> transposeRead(const KernelContext &ctx);

/// Slice of input 0 by starts/ends/axes/steps (clamped as onnxruntime).
absl::StatusOr<StridedRead> sliceRead(const KernelContext &ctx);

/// Concat's output shape; `axis` gets the normalised axis.
absl::StatusOr<Shape> concatShape(const KernelContext &ctx, int &axis);

/// Expand's output shape: input 0 broadcast with the shape operand.
absl::StatusOr<Shape> expandShape(const KernelContext &ctx);

/// Gather's output shape (data.shape[:axis] + indices.shape +
/// data.shape[axis+1:]); `axis` gets the normalised axis. The index values
/// are not read.
absl::StatusOr<Shape> gatherShape(const KernelContext &ctx, int &axis);

/// A reduction (ReduceSum/Mean/Max/Min, reduction.cpp): the output shape and
/// the input's dims split into kept and reduced groups (adjacent dims of one
/// kind merged, size-1 dims dropped), each with its input stride; `copy`:
/// empty axes with noop_with_empty_axes, the output is the input.
struct ReducePlan {
  Shape outShape;
  std::vector<int64_t> keptDims, keptStrides, redDims, redStrides;
  int64_t reduceCount = 1;
  bool copy = false;
};

/// The step's reduction geometry from its axes operand and attributes.
absl::StatusOr<ReducePlan> reducePlan(const KernelContext &ctx);

/// ConstantOfShape's output shape from its shape operand.
absl::StatusOr<Shape> constantOfShapeShape(const KernelContext &ctx);

/// Registers the steps of shape_values.cpp (Shape, Dim, Size,
/// ConstantOfShape, Range, Trilu, OneHot, NonZero); registerShapeOps calls
/// it.
void registerShapeValueOps(OpRegistry &registry);

/// GatherElements and ScatterElements: checks that `indices` has the rank of
/// `data` and fits it in every dim but `axis` (the index values are not
/// read).
absl::Status checkElementIndices(const KernelContext &ctx, const Shape &data,
                                 const Shape &indices, int axis);

/// ScatterElements's normalised axis, after checkElementIndices and the
/// check that the updates have the indices' shape.
absl::StatusOr<int> scatterElementsAxis(const KernelContext &ctx);

/// ArgMax's output shape (the axis dropped, or 1 with keepdims); `axis` gets
/// the normalised axis. An empty axis is an error.
absl::StatusOr<Shape> argMaxShape(const KernelContext &ctx, int &axis);

/// TopK's geometry: input 0 seen as [outer, n, inner] around `axis`, K read
/// from input 1 and checked against [0, n]; both outputs have `shape` (the
/// axis of size k).
struct TopKPlan {
  Shape shape;
  int axis = 0;
  int64_t outer = 1, n = 1, inner = 1, k = 0;
};
absl::StatusOr<TopKPlan> topKPlan(const KernelContext &ctx);

/// Whether TopK with `sorted = 0` keeps its k best in a binary heap (else
/// it selects them with std::nth_element): onnxruntime's CPU kernel's rule,
/// so that its unsorted order, which ops after the TopK may depend on, is
/// ours too (docs/plan-format.md, "TopK order").
bool topKUsesHeap(int64_t k, int64_t n);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_SHAPE_PLAN_H
