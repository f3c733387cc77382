//===- generic_ops.h - Shared helpers of the data ops -----------*- C++ -*-===//
//
// What generic_ops.cpp and select_ops.cpp (the host parts of the data ops
// and of the generic gates' selection ops) both need.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_GENERIC_OPS_H
#define MOERT_SRC_CUDA_GENERIC_OPS_H

#include "backends/cuda/device_op.h"

namespace moert::cuda {

/// Whether tensor `id`'s host value is current whenever a step reads it: a
/// weight, or the output of a step that runs on the host (the same decision
/// as the session's planDeviceOps). Absent optional operands count as host.
/// Graph inputs do not: a CUDA graph would bake a value read on the host
/// into its launches.
bool hostValued(int32_t id, const detail::ScheduleInfo &schedule);

/// Whether tensor `id` is the output of a step that runs on the GPU (its
/// value is on the device only, and reading it on the host would need a
/// synchronisation).
bool madeOnGpu(int32_t id, const detail::ScheduleInfo &schedule);

/// The dtype of the step's input `i`.
inline DType inType(const detail::StepInfo &step,
                    const detail::ScheduleInfo &schedule, int i) {
  return schedule.tensors[step.inputs[i]].dtype;
}

/// Device-to-device copy of `bytes` on the step's stream, nothing when in
/// place.
absl::Status copyOnDevice(DeviceStep &step, void *to, const void *from,
                          size_t bytes);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_GENERIC_OPS_H
