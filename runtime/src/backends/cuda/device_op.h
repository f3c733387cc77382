//===- device_op.h - Steps that run on the GPU ------------------*- C++ -*-===//
//
// The contract between the CUDA session (session.cpp) and the GPU
// implementations of plan steps. A `DeviceOp` runs one step on the session's
// compute stream through a `DeviceStep`, which hands out the device
// addresses of the step's operands (copying an input to the device first
// when only the host has its value), a scratch buffer sized at session start
// and the device error record. An op must never synchronise with the host or
// read device data on the host: sizes come from the shapes (host metadata)
// and the plan's bounds; what only the data can tell (an index out of range)
// is checked by the kernels, which record the first failure for the session
// to report after the run (`DeviceErrorRecord`).
//
// Ops are split in a host part (.cpp: shapes, checks, launch arguments) and
// kernels (.cu: plain launch functions), so that the kernel files include no
// Abseil or plan header.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_DEVICE_OP_H
#define MOERT_SRC_CUDA_DEVICE_OP_H

#include "backends/cuda/device_error.h"
#include "exec/session_state.h"
#include "kernels/common.h"

#include <cuda_runtime_api.h>

#include <string>

struct cublasContext;

namespace moert::cuda {

struct CublasApi;
struct ExpertLaunch;
class DeviceStepHost;

/// One execution of a step on the GPU.
class DeviceStep {
public:
  DeviceStep(DeviceStepHost &host, const detail::StepInfo &step,
             detail::KernelContext &ctx)
      : step(step), ctx(ctx), host_(host) {}

  const detail::StepInfo &step;
  /// Shapes, attributes and output allocation, as for a CPU kernel; the
  /// host data pointers it gives must not be used.
  detail::KernelContext &ctx;

  /// The device address of input `i`'s value, copied there first (stream
  /// ordered) when only the host mirror has it; null for an absent optional
  /// input.
  absl::StatusOr<const void *> input(int i);
  /// The device address of output `o`; ctx.allocate(o, shape) first.
  void *output(int o);
  cudaStream_t stream() const;
  const cudaDeviceProp &props() const;
  /// The step's scratch: at least DeviceOp::scratchBytes of this step,
  /// 256-byte aligned, uninitialised; the next step may reuse it.
  void *scratch() const;
  /// Where kernels record the first data error of the run.
  DeviceErrorRecord *errors() const;
  /// The session's cuBLAS handle, bound to stream(), created on first use.
  absl::StatusOr<cublasContext *> blas();
  const CublasApi &cublas() const;
  /// OK, or the error naming the call, the CUDA error and this step.
  absl::Status check(cudaError_t error, const char *call) const;

  /// A tiered plan's Experts step (docs/tiered-experts.md): its tiered
  /// layer, or -1; whether input `i` is paged (its device address is then
  /// the expert store's, and input(i) must not be asked for); and the run
  /// of the step through the store, in rounds of the experts it holds
  /// (`launch` with null addresses for the paged weights). Unlike other
  /// ops, a tiered step waits for its routing on the host.
  int32_t tierLayer() const;
  bool isPaged(int i) const;
  absl::Status runTiered(const ExpertLaunch &launch);

private:
  DeviceStepHost &host_;
};

/// A step kind the GPU runs.
struct DeviceOp {
  /// Whether this step runs on the GPU (dtypes and attributes it supports);
  /// decided once at session start. Null: always.
  bool (*accepts)(const detail::StepInfo &step,
                  const detail::ScheduleInfo &schedule) = nullptr;
  /// Enqueues the step on the stream.
  absl::Status (*run)(DeviceStep &step) = nullptr;
  /// Scratch the step needs at most, from the plan's tensor bounds
  /// (TensorInfo::size); null: none.
  uint64_t (*scratchBytes)(const detail::StepInfo &step,
                           const detail::ScheduleInfo &schedule) = nullptr;
  /// The message of an error its kernels recorded (without the step label).
  std::string (*describeError)(const DeviceErrorRecord &record) = nullptr;
};

/// Router, Dispatch, Combine, MatMul, Gemm (moe_routing.cpp).
const DeviceOp *routingDeviceOp(fb::OpKind op);
/// Experts, SharedExpert (experts.cpp).
const DeviceOp *expertDeviceOp(fb::OpKind op);
/// AssignSlots, Regroup, Ungroup, AllToAll, AllToAllStart/Wait
/// (collectives.cpp).
const DeviceOp *collectiveDeviceOp(fb::OpKind op);
/// The f32 data ops: views, Transpose, Slice, Concat, Expand, Gather, Where,
/// Cast, elementwise math, Softmax, the norms (generic_ops.cpp).
const DeviceOp *genericDeviceOp(fb::OpKind op);
/// TopK, ArgMax, GatherElements, ScatterElements on f32 data: the ops of
/// generic MoE gates (select_ops.cpp).
const DeviceOp *selectDeviceOp(fb::OpKind op);
/// Whether `op` exchanges rows between devices: on the GPU only over the
/// NCCL communicator (the sessions share the predicate).
using detail::isExchange;
/// The GPU implementation of `op`, or null when the step runs on the host.
const DeviceOp *deviceOpFor(fb::OpKind op);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_DEVICE_OP_H
