//===- generic_ops.cpp - The data ops of real models on the GPU -----------===//
//
// The host side of the generic data ops (kernels in generic_kernels.cu,
// per-thread logic in generic_logic.h), f32 data: views (Reshape, Flatten,
// Squeeze, Unsqueeze, Identity), Transpose, Slice, Concat, Expand, Gather,
// Where, Cast, unfused elementwise math and comparisons,
// ReduceSum/Mean/Max/Min, ConstantOfShape, Softmax, LayerNormalization and
// SimplifiedLayerNormalization. The shapes and their checks are the CPU
// kernels' own (kernels/shape_plan.h, broadcastOrError), so both backends
// accept, reject and shape a step alike.
//
// Shape operands (Reshape's shape, Squeeze/Unsqueeze's axes, Slice's
// starts/ends/axes/steps, Expand's shape, a reduction's axes,
// ConstantOfShape's shape) are host metadata: a step runs here only when
// each of them is a weight or the output of a step that runs on the host,
// whose host value is current when this step runs (`accepts`). Reading a
// device-only value would need a synchronisation, and a graph input could
// change between replays of a CUDA graph that baked its values into the
// launches: such steps stay on the host. I64 shape arithmetic (Dim, Shape,
// Concat of shape vectors, ...) stays on the host likewise; views also take
// data of any dtype that a GPU step made (a plain copy), and Concat 8-byte
// data when a GPU step made one of its inputs (a generic gate's i64 expert
// indices). The ops of generic gates (TopK, ArgMax, GatherElements,
// ScatterElements) are select_ops.cpp.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/generic_ops.h"

#include "backends/cuda/generic_kernels.h"
#include "backends/cuda/launch.h"
#include "kernels/shape_plan.h"

#include <cstring>

namespace moert::cuda {

bool hostValued(int32_t id, const detail::ScheduleInfo &schedule) {
  if (id < 0)
    return true;
  const detail::TensorInfo &tensor = schedule.tensors[id];
  if (tensor.isWeight)
    return true;
  if (tensor.producer < 0)
    return false; // A graph input: see the file comment.
  const detail::StepInfo &producer = schedule.steps[tensor.producer];
  if (producer.op == fb::OpKind::FusedElementwise || isExchange(producer.op))
    return false;
  const DeviceOp *op = deviceOpFor(producer.op);
  return !op || (op->accepts && !op->accepts(producer, schedule));
}

bool madeOnGpu(int32_t id, const detail::ScheduleInfo &schedule) {
  return id >= 0 && schedule.tensors[id].producer >= 0 &&
         !hostValued(id, schedule);
}

absl::Status copyOnDevice(DeviceStep &step, void *to, const void *from,
                          size_t bytes) {
  if (to == from || bytes == 0)
    return absl::OkStatus();
  return step.check(
      cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, step.stream()),
      "cudaMemcpyAsync");
}

namespace {

using detail::KernelContext;
using detail::ScheduleInfo;
using detail::Shape;
using detail::StepInfo;
using detail::Tensor;

static_assert(kStridedMaxRank == kMaxRank, "strided reads cover every rank");

DType outType(const StepInfo &step, const ScheduleInfo &schedule, int o) {
  return schedule.tensors[step.outputs[o]].dtype;
}

/// Inputs [first, size) are host-valued shape operands.
bool shapeOperandsOnHost(const StepInfo &step, const ScheduleInfo &schedule,
                         size_t first) {
  for (size_t i = first; i < step.inputs.size(); ++i)
    if (!hostValued(step.inputs[i], schedule))
      return false;
  return true;
}

/// planFusedArgs for `count` operand shapes broadcast to `out`.
absl::StatusOr<FusedArgs> broadcastArgs(const KernelContext &ctx,
                                        const Shape &out,
                                        const Shape *const *shapes, int count) {
  FusedArgs args;
  if (absl::Status status = planFusedArgs(out, shapes, count, args);
      !status.ok())
    return ctx.error(status.message());
  return args;
}

//===----------------------------------------------------------------------===//
// Views, Transpose, Slice, Concat, Expand, Gather
//===----------------------------------------------------------------------===//

/// Views move f32 data, and data of any type that a GPU step made (the
/// Router's indices, Dispatch's rows): copying those on the device saves a
/// read back. Other values (I64 shape arithmetic, graph inputs, weights)
/// are host metadata and stay on the host.
bool viewAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return (inType(step, schedule, 0) == DType::F32 ||
          madeOnGpu(step.inputs[0], schedule)) &&
         shapeOperandsOnHost(step, schedule, 1);
}

absl::Status viewRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  MOERT_ASSIGN_OR_RETURN(Shape shape, detail::viewShape(ctx));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, shape).status());
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  return copyOnDevice(step, step.output(0), in, ctx.in(0).bytes());
}

bool f32DataAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return inType(step, schedule, 0) == DType::F32 &&
         shapeOperandsOnHost(step, schedule, 1);
}

/// Transpose and Slice: a strided read of input 0.
absl::Status stridedRun(DeviceStep &step,
                        absl::StatusOr<detail::StridedRead> read) {
  if (!read.ok())
    return read.status();
  MOERT_ASSIGN_OR_RETURN(Tensor * out, step.ctx.allocate(0, read->shape));
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  StridedArgs args;
  std::memset(&args, 0, sizeof args);
  args.rank = read->shape.rank;
  for (int d = 0; d < args.rank; ++d) {
    args.shape[d] = read->shape[d];
    args.strides[d] = read->strides[d];
  }
  args.offset = read->offset;
  return step.check(
      launchStridedCopy(static_cast<const float *>(in), args, out->numel(),
                        static_cast<float *>(step.output(0)), step.stream()),
      "launchStridedCopy");
}

absl::Status transposeRun(DeviceStep &step) {
  return stridedRun(step, detail::transposeRead(step.ctx));
}

absl::Status sliceRun(DeviceStep &step) {
  return stridedRun(step, detail::sliceRead(step.ctx));
}

/// Concat of f32, or of 8-byte data that a GPU step made (the i64 expert
/// indices of a generic gate's ArgMax or TopK steps), copied as pairs of
/// words; I64 shape vectors made on the host stay there.
bool concatAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  if (step.inputs.size() > static_cast<size_t>(kConcatMaxInputs))
    return false;
  DType type = inType(step, schedule, 0);
  if (type == DType::F32)
    return true;
  if (dtypeSize(type) != 2 * sizeof(float))
    return false;
  for (int32_t id : step.inputs)
    if (madeOnGpu(id, schedule))
      return true;
  return false;
}

absl::Status concatRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  int axis = 0;
  MOERT_ASSIGN_OR_RETURN(Shape shape, detail::concatShape(ctx, axis));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  // An element of `words` 4-byte words: `words` f32 elements, bits copied.
  int64_t words = static_cast<int64_t>(dtypeSize(out->dtype) / sizeof(float));
  ConcatArgs args;
  std::memset(&args, 0, sizeof args);
  args.count = ctx.numInputs();
  args.outer = shape.span(0, axis);
  args.total = shape[axis];
  args.inner = shape.span(axis + 1, shape.rank) * words;
  for (int i = 0; i < args.count; ++i) {
    MOERT_ASSIGN_OR_RETURN(const void *in, step.input(i));
    args.inputs[i] = static_cast<const float *>(in);
    args.begin[i + 1] = args.begin[i] + ctx.in(i).shape[axis];
  }
  return step.check(launchConcat(args, out->numel() * words,
                                 static_cast<float *>(step.output(0)),
                                 step.stream()),
                    "launchConcat");
}

absl::Status expandRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  MOERT_ASSIGN_OR_RETURN(Shape shape, detail::expandShape(ctx));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, shape).status());
  const Shape *shapes[] = {&ctx.in(0).shape};
  MOERT_ASSIGN_OR_RETURN(FusedArgs args, broadcastArgs(ctx, shape, shapes, 1));
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  return step.check(launchBroadcastCopy(static_cast<const float *>(in), args,
                                        static_cast<float *>(step.output(0)),
                                        step.stream()),
                    "launchBroadcastCopy");
}

bool gatherAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  DType indices = inType(step, schedule, 1);
  return inType(step, schedule, 0) == DType::F32 &&
         (indices == DType::I64 || indices == DType::I32);
}

absl::Status gatherRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  int axis = 0;
  MOERT_ASSIGN_OR_RETURN(Shape shape, detail::gatherShape(ctx, axis));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  const Tensor &data = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  GatherArgs args;
  args.outer = data.shape.span(0, axis);
  args.dim = data.shape[axis];
  args.block = data.shape.span(axis + 1, data.shape.rank);
  args.count = indices.numel();
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *index, step.input(1));
  return step.check(launchGather(static_cast<const float *>(in), index,
                                 indices.dtype == DType::I32, args,
                                 out->numel(),
                                 static_cast<float *>(step.output(0)),
                                 step.errors(), step.step.index, step.stream()),
                    "launchGather");
}

std::string gatherError(const DeviceErrorRecord &record) {
  // The CPU's message, without the dim (the host does not know which
  // launch's data it was; the index and its position are what matter).
  return absl::StrCat("index ", record.a, " at position ", record.b,
                      " is out of range for the gathered dimension");
}

//===----------------------------------------------------------------------===//
// Elementwise: binary arithmetic, comparisons, Where, unary math, Cast
//===----------------------------------------------------------------------===//

/// The broadcast output of the step's inputs, allocated, and its arguments.
absl::StatusOr<FusedArgs> allocateBroadcast(KernelContext &ctx) {
  const Shape *shapes[3];
  int count = ctx.numInputs();
  for (int i = 0; i < count; ++i)
    shapes[i] = &ctx.in(i).shape;
  Shape shape;
  MOERT_RETURN_IF_ERROR(detail::broadcastOrError(ctx, shapes, count, shape));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, shape).status());
  return broadcastArgs(ctx, shape, shapes, count);
}

/// Binary ops with two f32 inputs (the variadic Min/Max/Sum with more run
/// on the host).
bool binaryAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return step.inputs.size() == 2 && inType(step, schedule, 0) == DType::F32 &&
         inType(step, schedule, 1) == DType::F32;
}

template <GenericBinary kOp> absl::Status binaryRun(DeviceStep &step) {
  MOERT_ASSIGN_OR_RETURN(FusedArgs args, allocateBroadcast(step.ctx));
  MOERT_ASSIGN_OR_RETURN(const void *a, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *b, step.input(1));
  return step.check(launchBinary(kOp, static_cast<const float *>(a),
                                 static_cast<const float *>(b), args,
                                 static_cast<float *>(step.output(0)),
                                 step.stream()),
                    "launchBinary");
}

template <GenericCompare kOp> absl::Status compareRun(DeviceStep &step) {
  MOERT_ASSIGN_OR_RETURN(FusedArgs args, allocateBroadcast(step.ctx));
  MOERT_ASSIGN_OR_RETURN(const void *a, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *b, step.input(1));
  return step.check(launchCompare(kOp, static_cast<const float *>(a),
                                  static_cast<const float *>(b), args,
                                  static_cast<uint8_t *>(step.output(0)),
                                  step.stream()),
                    "launchCompare");
}

bool whereAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return inType(step, schedule, 0) == DType::Bool &&
         inType(step, schedule, 1) == DType::F32;
}

absl::Status whereRun(DeviceStep &step) {
  MOERT_ASSIGN_OR_RETURN(FusedArgs args, allocateBroadcast(step.ctx));
  MOERT_ASSIGN_OR_RETURN(const void *cond, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *x, step.input(1));
  MOERT_ASSIGN_OR_RETURN(const void *y, step.input(2));
  return step.check(
      launchWhere(static_cast<const uint8_t *>(cond),
                  static_cast<const float *>(x), static_cast<const float *>(y),
                  args, static_cast<float *>(step.output(0)), step.stream()),
      "launchWhere");
}

bool unaryAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return inType(step, schedule, 0) == DType::F32;
}

template <GenericUnary kOp> absl::Status unaryRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, ctx.in(0).shape));
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  return step.check(
      launchUnary(kOp, static_cast<const float *>(in), out->numel(),
                  static_cast<float *>(step.output(0)), step.stream()),
      "launchUnary");
}

/// The GPU cast between two dtypes; false when the pair runs on the host.
bool castOf(DType from, DType to, GenericCast &cast) {
  if (from == DType::F32 && to == DType::I64)
    cast = GenericCast::F32ToI64;
  else if (from == DType::F32 && to == DType::I32)
    cast = GenericCast::F32ToI32;
  else if (from == DType::F32 && to == DType::Bool)
    cast = GenericCast::F32ToBool;
  else if (from == DType::I64 && to == DType::F32)
    cast = GenericCast::I64ToF32;
  else if (from == DType::I32 && to == DType::F32)
    cast = GenericCast::I32ToF32;
  else if (from == DType::Bool && to == DType::F32)
    cast = GenericCast::BoolToF32;
  else
    return false;
  return true;
}

bool castAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  DType from = inType(step, schedule, 0), to = outType(step, schedule, 0);
  GenericCast cast;
  return (from == DType::F32 && to == DType::F32) || castOf(from, to, cast);
}

absl::Status castRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, in.shape));
  MOERT_ASSIGN_OR_RETURN(const void *from, step.input(0));
  GenericCast cast;
  if (in.dtype == out->dtype)
    return copyOnDevice(step, step.output(0), from, in.bytes());
  if (!castOf(in.dtype, out->dtype, cast))
    return ctx.error("cast from ", dtypeName(in.dtype), " to ",
                     dtypeName(out->dtype), " does not run on the GPU");
  return step.check(
      launchCast(cast, from, out->numel(), step.output(0), step.stream()),
      "launchCast");
}

//===----------------------------------------------------------------------===//
// Reductions, ConstantOfShape
//===----------------------------------------------------------------------===//

template <GenericReduce kOp> absl::Status reduceRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  MOERT_ASSIGN_OR_RETURN(detail::ReducePlan plan, detail::reducePlan(ctx));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, plan.outShape));
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  if (plan.copy)
    return copyOnDevice(step, step.output(0), in, ctx.in(0).bytes());
  ReduceArgs args;
  std::memset(&args, 0, sizeof args);
  args.keptRank = static_cast<int>(plan.keptDims.size());
  args.reducedRank = static_cast<int>(plan.redDims.size());
  for (int d = 0; d < args.keptRank; ++d) {
    args.keptDims[d] = plan.keptDims[d];
    args.keptStrides[d] = plan.keptStrides[d];
  }
  for (int d = 0; d < args.reducedRank; ++d) {
    args.reducedDims[d] = plan.redDims[d];
    args.reducedStrides[d] = plan.redStrides[d];
  }
  args.reduceCount = plan.reduceCount;
  return step.check(
      launchReduce(kOp, static_cast<const float *>(in), args, out->numel(),
                   static_cast<float *>(step.output(0)), step.stream()),
      "launchReduce");
}

bool constantOfShapeAccepts(const StepInfo &step,
                            const ScheduleInfo &schedule) {
  return outType(step, schedule, 0) == DType::F32 &&
         shapeOperandsOnHost(step, schedule, 0);
}

absl::Status constantOfShapeRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  MOERT_ASSIGN_OR_RETURN(Shape shape, detail::constantOfShapeShape(ctx));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  return step.check(
      launchFill(ctx.attrs<fb::ConstantOfShapeAttrs>()->float_value(),
                 out->numel(), static_cast<float *>(step.output(0)),
                 step.stream()),
      "launchFill");
}

//===----------------------------------------------------------------------===//
// Softmax, LayerNormalization, SimplifiedLayerNormalization
//===----------------------------------------------------------------------===//

absl::Status softmaxRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(
      int axis, ctx.axis(ctx.attrs<fb::AxisAttrs>()->axis(), in.shape.rank));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, in.shape).status());
  RowSpan span;
  span.inner = in.shape.span(axis + 1, in.shape.rank);
  span.n = in.shape[axis];
  span.rows = in.shape.span(0, axis) * span.inner;
  MOERT_ASSIGN_OR_RETURN(const void *x, step.input(0));
  return step.check(launchSoftmax(static_cast<const float *>(x), span,
                                  static_cast<float *>(step.output(0)),
                                  step.stream()),
                    "launchSoftmax");
}

bool normAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  for (size_t i = 0; i < step.inputs.size(); ++i)
    if (step.inputs[i] >= 0 &&
        inType(step, schedule, static_cast<int>(i)) != DType::F32)
      return false;
  return true;
}

/// Checks that parameter `i` broadcasts to the normalised shape `target`
/// (the CPU's expandParameter check).
absl::Status checkParameter(const KernelContext &ctx, int i,
                            const Shape &target) {
  const Shape &p = ctx.in(i).shape;
  Shape broadcast;
  const Shape *shapes[] = {&target, &p};
  if (!detail::broadcastShapes(shapes, 2, broadcast) || broadcast != target)
    return ctx.error("input ", i, " of shape ", p.str(),
                     " does not broadcast to the normalised shape ",
                     target.str());
  return absl::OkStatus();
}

template <bool kSimplified> absl::Status normRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const auto *attrs = ctx.attrs<fb::NormAttrs>();
  const Tensor &x = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(int axis, ctx.axis(attrs->axis(), x.shape.rank));
  Shape target;
  for (int d = axis; d < x.shape.rank; ++d)
    target.push(x.shape[d]);
  bool hasBias = !kSimplified && ctx.has(2);
  MOERT_RETURN_IF_ERROR(checkParameter(ctx, 1, target));
  if (hasBias)
    MOERT_RETURN_IF_ERROR(checkParameter(ctx, 2, target));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, x.shape).status());
  Shape stats = x.shape;
  for (int d = axis; d < x.shape.rank; ++d)
    stats[d] = 1;
  float *meanOut = nullptr, *invOut = nullptr;
  for (int o = 1; o < ctx.numOutputs(); ++o) {
    MOERT_RETURN_IF_ERROR(ctx.allocate(o, stats).status());
    (kSimplified || o == 2 ? invOut : meanOut) =
        static_cast<float *>(step.output(o));
  }
  const Shape *shapes[] = {&ctx.in(1).shape,
                           hasBias ? &ctx.in(2).shape : &ctx.in(1).shape};
  MOERT_ASSIGN_OR_RETURN(FusedArgs params,
                         broadcastArgs(ctx, target, shapes, 2));
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *scale, step.input(1));
  const void *bias = nullptr;
  if (hasBias) {
    MOERT_ASSIGN_OR_RETURN(bias, step.input(2));
  }
  return step.check(
      launchNorm(
          static_cast<const float *>(in), x.shape.span(0, axis), target.numel(),
          attrs->epsilon(), kSimplified, params,
          static_cast<const float *>(scale), static_cast<const float *>(bias),
          static_cast<float *>(step.output(0)), meanOut, invOut, step.stream()),
      "launchNorm");
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

const DeviceOp kView{viewAccepts, viewRun, nullptr, nullptr};
const DeviceOp kTranspose{unaryAccepts, transposeRun, nullptr, nullptr};
const DeviceOp kSlice{f32DataAccepts, sliceRun, nullptr, nullptr};
const DeviceOp kConcat{concatAccepts, concatRun, nullptr, nullptr};
const DeviceOp kExpand{f32DataAccepts, expandRun, nullptr, nullptr};
const DeviceOp kGather{gatherAccepts, gatherRun, nullptr, gatherError};
const DeviceOp kWhere{whereAccepts, whereRun, nullptr, nullptr};
const DeviceOp kCast{castAccepts, castRun, nullptr, nullptr};
const DeviceOp kSoftmax{unaryAccepts, softmaxRun, nullptr, nullptr};
const DeviceOp kLayerNorm{normAccepts, normRun<false>, nullptr, nullptr};
const DeviceOp kRmsNorm{normAccepts, normRun<true>, nullptr, nullptr};
const DeviceOp kConstantOfShape{constantOfShapeAccepts, constantOfShapeRun,
                                nullptr, nullptr};

template <GenericBinary kOp> const DeviceOp *binaryOp() {
  static const DeviceOp op{binaryAccepts, binaryRun<kOp>, nullptr, nullptr};
  return &op;
}
template <GenericCompare kOp> const DeviceOp *compareOp() {
  static const DeviceOp op{binaryAccepts, compareRun<kOp>, nullptr, nullptr};
  return &op;
}
template <GenericReduce kOp> const DeviceOp *reduceOp() {
  static const DeviceOp op{f32DataAccepts, reduceRun<kOp>, nullptr, nullptr};
  return &op;
}
template <GenericUnary kOp> const DeviceOp *unaryOp() {
  static const DeviceOp op{unaryAccepts, unaryRun<kOp>, nullptr, nullptr};
  return &op;
}

} // namespace

const DeviceOp *genericDeviceOp(fb::OpKind op) {
  using K = fb::OpKind;
  switch (op) {
  case K::Reshape:
  case K::Flatten:
  case K::Squeeze:
  case K::Unsqueeze:
  case K::Identity:
    return &kView;
  case K::Transpose:
    return &kTranspose;
  case K::Slice:
    return &kSlice;
  case K::Concat:
    return &kConcat;
  case K::Expand:
    return &kExpand;
  case K::Gather:
    return &kGather;
  case K::Where:
    return &kWhere;
  case K::Cast:
    return &kCast;
  case K::Softmax:
    return &kSoftmax;
  case K::LayerNormalization:
    return &kLayerNorm;
  case K::SimplifiedLayerNormalization:
    return &kRmsNorm;
  case K::ConstantOfShape:
    return &kConstantOfShape;
  case K::ReduceSum:
    return reduceOp<GenericReduce::Sum>();
  case K::ReduceMean:
    return reduceOp<GenericReduce::Mean>();
  case K::ReduceMax:
    return reduceOp<GenericReduce::Max>();
  case K::ReduceMin:
    return reduceOp<GenericReduce::Min>();
  case K::Add:
    return binaryOp<GenericBinary::Add>();
  case K::Sub:
    return binaryOp<GenericBinary::Sub>();
  case K::Mul:
    return binaryOp<GenericBinary::Mul>();
  case K::Div:
    return binaryOp<GenericBinary::Div>();
  case K::Min:
    return binaryOp<GenericBinary::Min>();
  case K::Max:
    return binaryOp<GenericBinary::Max>();
  case K::Equal:
    return compareOp<GenericCompare::Equal>();
  case K::Less:
    return compareOp<GenericCompare::Less>();
  case K::LessOrEqual:
    return compareOp<GenericCompare::LessOrEqual>();
  case K::Greater:
    return compareOp<GenericCompare::Greater>();
  case K::GreaterOrEqual:
    return compareOp<GenericCompare::GreaterOrEqual>();
  case K::Neg:
    return unaryOp<GenericUnary::Neg>();
  case K::Abs:
    return unaryOp<GenericUnary::Abs>();
  case K::Relu:
    return unaryOp<GenericUnary::Relu>();
  case K::Sign:
    return unaryOp<GenericUnary::Sign>();
  case K::Sqrt:
    return unaryOp<GenericUnary::Sqrt>();
  case K::Reciprocal:
    return unaryOp<GenericUnary::Reciprocal>();
  case K::Exp:
    return unaryOp<GenericUnary::Exp>();
  case K::Log:
    return unaryOp<GenericUnary::Log>();
  case K::Tanh:
    return unaryOp<GenericUnary::Tanh>();
  case K::Erf:
    return unaryOp<GenericUnary::Erf>();
  case K::Sigmoid:
    return unaryOp<GenericUnary::Sigmoid>();
  case K::Sin:
    return unaryOp<GenericUnary::Sin>();
  case K::Cos:
    return unaryOp<GenericUnary::Cos>();
  case K::Floor:
    return unaryOp<GenericUnary::Floor>();
  case K::Ceil:
    return unaryOp<GenericUnary::Ceil>();
  default:
    return nullptr;
  }
}

} // namespace moert::cuda
