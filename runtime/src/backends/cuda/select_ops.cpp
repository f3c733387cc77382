//===- select_ops.cpp - The ops of generic MoE gates on the GPU -----------===//
//
// The host side of TopK, ArgMax, GatherElements and ScatterElements on f32
// data (kernels in generic_kernels.cu, per-thread logic in select_logic.h):
// the ops that a gate moec does not know is left as (`score: generic` in
// `moec compile --report`: llama4's TopK-sigmoid-scatter, phimoe's sparse
// mixer), so that such a gate runs on the GPU without a read back of its
// scores, and its plan can replay CUDA graphs. Shapes and their checks are
// the CPU kernels' own (kernels/shape_plan.h: topKPlan, argMaxShape,
// checkElementIndices, scatterElementsAxis).
//
// TopK's K is read on the host: the step runs here only when K is
// host-valued (a weight, or made by a host step). With sorted = 0 the order
// must be the CPU's (docs/plan-format.md, "TopK order"): the kernel keeps
// the CPU's heap, which is that order wherever topKUsesHeap(k, n) holds, so
// an unsorted TopK runs here only when the plan shows that it always does
// (K a weight below 4, or with the axis static; or an axis of at most 3).
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/generic_ops.h"

#include "backends/cuda/generic_kernels.h"
#include "kernels/shape_plan.h"

#include <cstring>

namespace moert::cuda {
namespace {

using detail::KernelContext;
using detail::ScheduleInfo;
using detail::Shape;
using detail::StepInfo;
using detail::Tensor;
using detail::TensorInfo;

bool isIndexType(DType type) {
  return type == DType::I64 || type == DType::I32;
}

/// The value of a one-element I64 weight, if `tensor` is one.
bool constantScalar(const TensorInfo &tensor, int64_t &value) {
  if (!tensor.isWeight || !tensor.weightData || tensor.dtype != DType::I64 ||
      tensor.size != sizeof(int64_t))
    return false;
  std::memcpy(&value, tensor.weightData, sizeof value);
  return true;
}

//===----------------------------------------------------------------------===//
// TopK, ArgMax
//===----------------------------------------------------------------------===//

/// Whether every run of this unsorted TopK takes the CPU's heap (or k <= 1,
/// where both of the CPU's ways give the one best entry).
bool unsortedTakesTheHeap(const StepInfo &step, const ScheduleInfo &schedule,
                          int64_t axis) {
  const TensorInfo &x = schedule.tensors[step.inputs[0]];
  if (axis < 0)
    axis += x.rank;
  if (axis < 0 || axis >= x.rank)
    return false; // The CPU reports the bad axis.
  const detail::DimInfo &n = x.dims[axis];
  int64_t k = 0;
  if (!constantScalar(schedule.tensors[step.inputs[1]], k))
    return n.bound < 4; // Any K <= n < 4 takes the heap.
  return k < 4 ||
         (n.kind == fb::DimKind::Static && detail::topKUsesHeap(k, n.bound));
}

bool topKAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  const auto *attrs = step.fb->attrs_as<fb::TopKAttrs>();
  return attrs && inType(step, schedule, 0) == DType::F32 &&
         hostValued(step.inputs[1], schedule) &&
         (attrs->sorted() ||
          unsortedTakesTheHeap(step, schedule, attrs->axis()));
}

absl::Status topKRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const auto *attrs = ctx.attrs<fb::TopKAttrs>();
  MOERT_ASSIGN_OR_RETURN(detail::TopKPlan plan, detail::topKPlan(ctx));
  if (!attrs->sorted() && !detail::topKUsesHeap(plan.k, plan.n))
    // topKAccepts rules this out; kept so that no other order is returned.
    return ctx.error("unsorted TopK with K = ", plan.k, " of ", plan.n,
                     " takes std::nth_element's order, which the GPU does not "
                     "reproduce");
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, plan.shape).status());
  MOERT_RETURN_IF_ERROR(ctx.allocate(1, plan.shape).status());
  TopKArgs args;
  args.span.inner = plan.inner;
  args.span.n = plan.n;
  args.span.rows = plan.outer * plan.inner;
  args.k = plan.k;
  args.largest = attrs->largest();
  args.sorted = attrs->sorted();
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  return step.check(launchTopK(static_cast<const float *>(in), args,
                               static_cast<float *>(step.output(0)),
                               static_cast<int64_t *>(step.output(1)),
                               step.stream()),
                    "launchTopK");
}

bool f32Accepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return inType(step, schedule, 0) == DType::F32;
}

absl::Status argMaxRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Shape &in = ctx.in(0).shape;
  int axis = 0;
  MOERT_ASSIGN_OR_RETURN(Shape shape, detail::argMaxShape(ctx, axis));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, shape).status());
  RowSpan span;
  span.inner = in.span(axis + 1, in.rank);
  span.n = in[axis];
  span.rows = in.span(0, axis) * span.inner;
  MOERT_ASSIGN_OR_RETURN(const void *x, step.input(0));
  return step.check(
      launchArgMax(static_cast<const float *>(x), span,
                   ctx.attrs<fb::ArgMaxAttrs>()->select_last_index(),
                   static_cast<int64_t *>(step.output(0)), step.stream()),
      "launchArgMax");
}

//===----------------------------------------------------------------------===//
// GatherElements, ScatterElements
//===----------------------------------------------------------------------===//

/// The element-index arguments of `indices` into data of shape `data`.
ElementIndexArgs elementIndexArgs(const Shape &data, const Shape &indices,
                                  int axis) {
  ElementIndexArgs args;
  std::memset(&args, 0, sizeof args);
  args.rank = data.rank;
  args.axis = axis;
  args.dim = data[axis];
  int64_t strides[kMaxRank];
  detail::contiguousStrides(data, strides);
  for (int d = 0; d < data.rank; ++d) {
    args.shape[d] = indices[d];
    args.strides[d] = strides[d];
  }
  return args;
}

bool gatherElementsAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return inType(step, schedule, 0) == DType::F32 &&
         isIndexType(inType(step, schedule, 1));
}

absl::Status gatherElementsRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  MOERT_ASSIGN_OR_RETURN(
      int axis, ctx.axis(ctx.attrs<fb::AxisAttrs>()->axis(), data.shape.rank));
  MOERT_RETURN_IF_ERROR(
      detail::checkElementIndices(ctx, data.shape, indices.shape, axis));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, indices.shape));
  ElementIndexArgs args = elementIndexArgs(data.shape, indices.shape, axis);
  MOERT_ASSIGN_OR_RETURN(const void *x, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *index, step.input(1));
  return step.check(
      launchGatherElements(static_cast<const float *>(x), index,
                           indices.dtype == DType::I32, args, out->numel(),
                           static_cast<float *>(step.output(0)), step.errors(),
                           step.step.index, step.stream()),
      "launchGatherElements");
}

bool scatterElementsAccepts(const StepInfo &step,
                            const ScheduleInfo &schedule) {
  return inType(step, schedule, 0) == DType::F32 &&
         isIndexType(inType(step, schedule, 1)) &&
         inType(step, schedule, 2) == DType::F32 &&
         step.fb->attrs_as<fb::ScatterAttrs>() &&
         step.fb->attrs_as<fb::ScatterAttrs>()->reduction() <=
             fb::ScatterReduction::MAX;
}

ScatterOp scatterOp(fb::ScatterReduction reduction) {
  switch (reduction) {
  case fb::ScatterReduction::Add:
    return ScatterOp::Add;
  case fb::ScatterReduction::Mul:
    return ScatterOp::Mul;
  case fb::ScatterReduction::Max:
    return ScatterOp::Max;
  case fb::ScatterReduction::Min:
    return ScatterOp::Min;
  default:
    return ScatterOp::None;
  }
}

absl::Status scatterElementsRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  MOERT_ASSIGN_OR_RETURN(int axis, detail::scatterElementsAxis(ctx));
  // Every input's device address before the output (possibly data's slot)
  // is written.
  MOERT_ASSIGN_OR_RETURN(const void *x, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *index, step.input(1));
  MOERT_ASSIGN_OR_RETURN(const void *updates, step.input(2));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, data.shape).status());
  float *out = static_cast<float *>(step.output(0));
  MOERT_RETURN_IF_ERROR(copyOnDevice(step, out, x, data.bytes()));
  int64_t count = indices.shape[axis];
  int64_t lines = count ? indices.numel() / count : 0;
  ElementIndexArgs args = elementIndexArgs(data.shape, indices.shape, axis);
  return step.check(launchScatterElements(
                        scatterOp(ctx.attrs<fb::ScatterAttrs>()->reduction()),
                        index, indices.dtype == DType::I32,
                        static_cast<const float *>(updates), args, lines, out,
                        step.errors(), step.step.index, step.stream()),
                    "launchScatterElements");
}

std::string elementIndexError(const DeviceErrorRecord &record) {
  // The CPU's message, without the axis size (the host does not know which
  // launch's data it was; the index and its position are what matter).
  return absl::StrCat("index ", record.a, " at position ", record.b,
                      " is out of range for the indexed axis");
}

const DeviceOp kTopK{topKAccepts, topKRun, nullptr, nullptr};
const DeviceOp kArgMax{f32Accepts, argMaxRun, nullptr, nullptr};
const DeviceOp kGatherElements{gatherElementsAccepts, gatherElementsRun,
                               nullptr, elementIndexError};
const DeviceOp kScatterElements{scatterElementsAccepts, scatterElementsRun,
                                nullptr, elementIndexError};

} // namespace

const DeviceOp *selectDeviceOp(fb::OpKind op) {
  switch (op) {
  case fb::OpKind::TopK:
    return &kTopK;
  case fb::OpKind::ArgMax:
    return &kArgMax;
  case fb::OpKind::GatherElements:
    return &kGatherElements;
  case fb::OpKind::ScatterElements:
    return &kScatterElements;
  default:
    return nullptr;
  }
}

} // namespace moert::cuda
