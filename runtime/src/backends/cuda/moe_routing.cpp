//===- moe_routing.cpp - Routing steps and GEMMs on the GPU ---------------===//
//
// The host side of the routing steps on the GPU: the shape checks of the CPU
// kernels (shared: kernels/moe.h, kernels/matmul.h), output allocation
// against the plan, and the launches of routing_kernels.cu or cuBLAS. No
// function here reads device data or waits for the device: sizes come from
// the shapes, scratch from the plan's bounds (scratchBytes), and what only
// the data can tell is recorded by the kernels (describeError).
//
// MatMul and Gemm run on cuBLAS in fp32 (CUBLAS_DEFAULT_MATH: no TF32),
// row-major through the transposed product: C = A B is C^T = B^T A^T in
// cuBLAS's column-major view, so B is passed first and nothing is copied.
// Broadcast batch dimensions become strided batched GEMMs (stride 0 for a
// broadcast operand), one call per run of the CPU's BroadcastLoop.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/cublas.h"
#include "backends/cuda/device_op.h"
#include "backends/cuda/routing_kernels.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <climits>

namespace moert::cuda {
namespace {

using detail::BroadcastLoop;
using detail::KernelContext;
using detail::ScheduleInfo;
using detail::Shape;
using detail::StepInfo;
using detail::Tensor;
using detail::TensorInfo;

const TensorInfo &inputInfo(const StepInfo &step, const ScheduleInfo &schedule,
                            int i) {
  return schedule.tensors[step.inputs[i]];
}

/// Whether every present input and output of `step` has dtype F32, except
/// the I64 tensors named by the bit masks.
bool dtypesAre(const StepInfo &step, const ScheduleInfo &schedule,
               uint32_t i64Inputs, uint32_t i64Outputs) {
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    if (step.inputs[i] < 0)
      continue;
    DType want = i64Inputs >> i & 1 ? DType::I64 : DType::F32;
    if (schedule.tensors[step.inputs[i]].dtype != want)
      return false;
  }
  for (size_t o = 0; o < step.outputs.size(); ++o) {
    DType want = i64Outputs >> o & 1 ? DType::I64 : DType::F32;
    if (schedule.tensors[step.outputs[o]].dtype != want)
      return false;
  }
  return true;
}

/// The typed device address of input `i` (null when absent).
template <typename T>
absl::StatusOr<const T *> deviceInput(DeviceStep &step, int i) {
  MOERT_ASSIGN_OR_RETURN(const void *pointer, step.input(i));
  return static_cast<const T *>(pointer);
}

//===----------------------------------------------------------------------===//
// Router
//===----------------------------------------------------------------------===//

bool routerAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  const auto *attrs = step.fb->attrs_as<fb::RouterAttrs>();
  return attrs && attrs->top_k() <= kRouterMaxTopK &&
         attrs->n_group() <= kRouterMaxGroups &&
         dtypesAre(step, schedule, 0, 0b10);
}

absl::Status routerRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const auto *attrs = ctx.attrs<fb::RouterAttrs>();
  const Shape &shape = ctx.in(0).shape;
  int rank = shape.rank;
  RouterLogicParams p;
  MOERT_ASSIGN_OR_RETURN(Shape outShape, detail::readRouter(ctx, p));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, outShape).status());
  MOERT_RETURN_IF_ERROR(ctx.allocate(1, outShape).status());
  MOERT_ASSIGN_OR_RETURN(const float *logits, deviceInput<float>(step, 0));
  MOERT_ASSIGN_OR_RETURN(const float *bias, deviceInput<float>(step, 1));
  int64_t tokens = shape.span(0, rank - 1);
  int64_t sequences = rank == 3 ? shape[0] : 1;
  return step.check(
      launchRouter(p, logits, bias, tokens, sequences, attrs->capacity(),
                   attrs->normalize_kept_epsilon(),
                   static_cast<float *>(step.output(0)),
                   static_cast<int64_t *>(step.output(1)), step.stream()),
      "launching the router kernels");
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

/// The most assignments of a Dispatch step: its indices' planned bytes.
int64_t dispatchRowBound(const StepInfo &step, const ScheduleInfo &schedule) {
  return static_cast<int64_t>(inputInfo(step, schedule, 1).size /
                              sizeof(int64_t));
}

uint64_t dispatchScratch(const StepInfo &step, const ScheduleInfo &schedule) {
  int64_t experts = step.fb->attrs_as<fb::DispatchAttrs>()->num_experts();
  return static_cast<uint64_t>(
      dispatchScratchBytes(dispatchRowBound(step, schedule), experts));
}

/// The most scratch a Dispatch step may take on the GPU; beyond it (a huge
/// expert count times a huge token bound) the step runs on the host.
constexpr uint64_t kMaxDispatchScratch = uint64_t(1) << 30;

bool dispatchAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  // Per-chunk counts are 32-bit. Checked before the scratch size, whose
  // product it keeps far from overflow (num_experts is the offsets' static
  // size, bounded by the arena).
  int64_t experts = step.fb->attrs_as<fb::DispatchAttrs>()->num_experts();
  return dispatchRowBound(step, schedule) <= INT32_MAX &&
         experts <= INT32_MAX &&
         dispatchScratch(step, schedule) <= kMaxDispatchScratch &&
         dtypesAre(step, schedule, 0b10, 0b110);
}

absl::Status dispatchRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Shape &tokens = ctx.in(0).shape;
  const Shape &indices = ctx.in(1).shape;
  int64_t E = ctx.attrs<fb::DispatchAttrs>()->num_experts();
  int64_t T = tokens[0], H = tokens[1], k = indices[1];
  MOERT_RETURN_IF_ERROR(detail::checkDispatchShapes(ctx));
  int64_t rows = T * k;
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, Shape{rows, H}).status());
  MOERT_RETURN_IF_ERROR(ctx.allocate(1, Shape{E + 1}).status());
  MOERT_RETURN_IF_ERROR(ctx.allocate(2, Shape{rows}).status());
  // The scratch holds the counts of the planned bound of assignments: the
  // indices live in their planned slot, so rows never exceed it.
  MOERT_ASSIGN_OR_RETURN(const float *x, deviceInput<float>(step, 0));
  MOERT_ASSIGN_OR_RETURN(const int64_t *idx, deviceInput<int64_t>(step, 1));
  return step.check(
      launchDispatch(x, idx, T, k, H, E, static_cast<float *>(step.output(0)),
                     static_cast<int64_t *>(step.output(1)),
                     static_cast<int64_t *>(step.output(2)), step.scratch(),
                     step.errors(), step.step.index, step.stream()),
      "launching the dispatch kernels");
}

std::string dispatchError(const DeviceErrorRecord &record) {
  return absl::StrCat("expert index ", record.b, " at position ", record.a,
                      " is out of range [-1, num_experts)");
}

//===----------------------------------------------------------------------===//
// Combine
//===----------------------------------------------------------------------===//

bool combineAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return dtypesAre(step, schedule, 0b10010, 0);
}

uint64_t combineScratch(const StepInfo &step, const ScheduleInfo &schedule) {
  // weights [T, k]: one slot per assignment.
  return static_cast<uint64_t>(combineScratchBytes(
      static_cast<int64_t>(inputInfo(step, schedule, 2).size / sizeof(float))));
}

absl::Status combineRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Shape &outputs = ctx.in(0).shape;
  const Shape &weights = ctx.in(2).shape;
  int64_t N = outputs[0], H = outputs[1];
  int64_t T = weights[0], k = weights[1];
  MOERT_RETURN_IF_ERROR(detail::checkCombineShapes(ctx));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, Shape{T, H}).status());
  MOERT_ASSIGN_OR_RETURN(const float *y, deviceInput<float>(step, 0));
  MOERT_ASSIGN_OR_RETURN(const int64_t *source, deviceInput<int64_t>(step, 1));
  MOERT_ASSIGN_OR_RETURN(const float *w, deviceInput<float>(step, 2));
  MOERT_ASSIGN_OR_RETURN(const float *passthrough, deviceInput<float>(step, 3));
  MOERT_ASSIGN_OR_RETURN(const int64_t *indices, deviceInput<int64_t>(step, 4));
  return step.check(launchCombine(y, source, w, passthrough, indices, N, T, k,
                                  H, static_cast<float *>(step.output(0)),
                                  step.scratch(), step.errors(),
                                  step.step.index, step.stream()),
                    "launching the combine kernels");
}

std::string combineError(const DeviceErrorRecord &record) {
  if (record.code == kCombineSourceRepeats)
    return absl::StrCat("source[", record.a,
                        "] repeats the assignment of source[", record.b, "]");
  return absl::StrCat("source[", record.a, "] = ", record.b,
                      " is out of range [-1, T * k)");
}

//===----------------------------------------------------------------------===//
// MatMul and Gemm (cuBLAS)
//===----------------------------------------------------------------------===//

bool gemmAccepts(const StepInfo &step, const ScheduleInfo &schedule) {
  return dtypesAre(step, schedule, 0, 0);
}

/// cuBLAS with the session's handle in plain fp32 mode.
struct Blas {
  const CublasApi &api;
  cublasHandle_t handle;
  const std::string &where;

  absl::Status check(cublasStatus_t status, const char *call) const {
    return cublasCheck(status, call, where);
  }

  /// Row-major C[m, n] = alpha op(A) op(B) + beta C (leading dimensions in
  /// elements), `batch` times at the given element strides.
  absl::Status gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, long long strideA,
                    const float *b, int64_t ldb, long long strideB, float beta,
                    float *c, int64_t ldc, long long strideC,
                    int64_t batch) const {
    ColumnMajorGemm call =
        columnMajorGemm(transA, transB, m, n, k, lda, ldb, ldc);
    cublasOperation_t op1 = call.transFirst ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op2 = call.transSecond ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
      return check(api.sgemm(handle, op1, op2, int(call.m), int(call.n),
                             int(call.k), &alpha, b, int(call.ldFirst), a,
                             int(call.ldSecond), &beta, c, int(call.ldc)),
                   "cublasSgemm");
    // The batch count is an int: larger batches go in pieces.
    for (int64_t done = 0; done < batch; done += INT32_MAX) {
      int count = static_cast<int>(std::min<int64_t>(batch - done, INT32_MAX));
      MOERT_RETURN_IF_ERROR(
          check(api.sgemmStridedBatched(
                    handle, op1, op2, int(call.m), int(call.n), int(call.k),
                    &alpha, b + done * strideB, int(call.ldFirst), strideB,
                    a + done * strideA, int(call.ldSecond), strideA, &beta,
                    c + done * strideC, int(call.ldc), strideC, count),
                "cublasSgemmStridedBatched"));
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<Blas> blasOf(DeviceStep &step) {
  MOERT_ASSIGN_OR_RETURN(cublasHandle_t handle, step.blas());
  Blas blas{step.cublas(), handle, step.step.label};
  // fp32 throughout: no TF32 tensor-core rounding of the operands.
  MOERT_RETURN_IF_ERROR(blas.check(
      blas.api.setMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  return blas;
}

absl::Status matmulRun(DeviceStep &step) {
  MOERT_ASSIGN_OR_RETURN(detail::MatMulShapes p, detail::planMatMul(step.ctx));
  int64_t m = p.m, n = p.n, k = p.k;
  int64_t count = p.batch.numel();
  if (count == 0 || m == 0 || n == 0)
    return absl::OkStatus();
  float *c = static_cast<float *>(step.output(0));
  if (k == 0) // Empty products: zeros.
    return step.check(cudaMemsetAsync(c, 0, p.out->bytes(), step.stream()),
                      "cudaMemsetAsync");
  MOERT_ASSIGN_OR_RETURN(const float *a, deviceInput<float>(step, 0));
  MOERT_ASSIGN_OR_RETURN(const float *b, deviceInput<float>(step, 1));
  MOERT_ASSIGN_OR_RETURN(Blas blas, blasOf(step));
  if (p.batchB.numel() == 1 && p.batchA.numel() == count &&
      detail::fitsBlas(count * m))
    // B is one matrix: A's batch folds into its rows, one call.
    return blas.gemm(false, false, count * m, n, k, 1.0f, a, k, 0, b, n, 0,
                     0.0f, c, n, 0, 1);
  // One strided batched call per run of the broadcast: along a run each
  // operand advances by one matrix or stays (stride 0).
  const Shape *batches[] = {&p.batchA, &p.batchB};
  BroadcastLoop loop(p.batch, batches, 2);
  long long strideA = loop.innerStride(0) * m * k;
  long long strideB = loop.innerStride(1) * k * n;
  absl::Status status;
  loop.forEachRun(0, count,
                  [&](int64_t o, const int64_t *offsets, int64_t length) {
                    if (status.ok())
                      status = blas.gemm(false, false, m, n, k, 1.0f,
                                         a + offsets[0] * m * k, k, strideA,
                                         b + offsets[1] * k * n, n, strideB,
                                         0.0f, c + o * m * n, n, m * n, length);
                  });
  return status;
}

absl::Status gemmRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const auto *attrs = ctx.attrs<fb::GemmAttrs>();
  const Shape &shapeA = ctx.in(0).shape, &shapeB = ctx.in(1).shape;
  MOERT_ASSIGN_OR_RETURN(detail::GemmShapes g, detail::planGemm(ctx));
  bool ta = g.transA, tb = g.transB;
  int64_t m = g.m, n = g.n, k = g.k;
  Tensor *out = g.out;
  float *y = static_cast<float *>(step.output(0));
  float beta = 0;
  const float *c = nullptr;
  int64_t rowStride = 0, colStride = 0;
  if (g.addsC) {
    // Y starts as C broadcast to [M, N] (unidirectional).
    const Shape &shapeC = ctx.in(2).shape;
    gemmCStrides(shapeC.rank, shapeC.dims, rowStride, colStride);
    beta = attrs->beta();
    MOERT_ASSIGN_OR_RETURN(c, deviceInput<float>(step, 2));
  }
  if (m == 0 || n == 0)
    return absl::OkStatus();
  float alpha = attrs->alpha();
  if (k == 0 || alpha == 0) {
    // No product: Y = beta C (BLAS may leave C untouched here).
    if (!c)
      return step.check(cudaMemsetAsync(y, 0, out->bytes(), step.stream()),
                        "cudaMemsetAsync");
    return step.check(
        launchBroadcastC(c, rowStride, colStride, m, n, beta, y, step.stream()),
        "launching the Gemm C broadcast");
  }
  if (c)
    MOERT_RETURN_IF_ERROR(step.check(
        launchBroadcastC(c, rowStride, colStride, m, n, 1.0f, y, step.stream()),
        "launching the Gemm C broadcast"));
  MOERT_ASSIGN_OR_RETURN(const float *a, deviceInput<float>(step, 0));
  MOERT_ASSIGN_OR_RETURN(const float *b, deviceInput<float>(step, 1));
  MOERT_ASSIGN_OR_RETURN(Blas blas, blasOf(step));
  return blas.gemm(ta, tb, m, n, k, alpha, a, shapeA[1], 0, b, shapeB[1], 0,
                   beta, y, n, 0, 1);
}

const DeviceOp kRouter{routerAccepts, routerRun, nullptr, nullptr};
const DeviceOp kDispatch{dispatchAccepts, dispatchRun, dispatchScratch,
                         dispatchError};
const DeviceOp kCombine{combineAccepts, combineRun, combineScratch,
                        combineError};
const DeviceOp kMatMul{gemmAccepts, matmulRun, nullptr, nullptr};
const DeviceOp kGemm{gemmAccepts, gemmRun, nullptr, nullptr};

} // namespace

const DeviceOp *routingDeviceOp(fb::OpKind op) {
  switch (op) {
  case fb::OpKind::Router:
    return &kRouter;
  case fb::OpKind::Dispatch:
    return &kDispatch;
  case fb::OpKind::Combine:
    return &kCombine;
  case fb::OpKind::MatMul:
    return &kMatMul;
  case fb::OpKind::Gemm:
    return &kGemm;
  default:
    return nullptr;
  }
}

} // namespace moert::cuda
