//===- placement.h - Which steps the CUDA backend runs where ----*- C++ -*-===//
//
// The decisions a CudaSession takes at start that depend on the plan alone,
// not on a GPU: which steps run on the GPU (a compiler-generated kernel, or
// a DeviceOp that accepts the step) and whether runs can replay CUDA graphs
// (the host steps compute from sizes and weights only). The session takes
// them from here, and `moe-run --placement` prints them on machines without
// a GPU, so that they are tested everywhere.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_PLACEMENT_H
#define MOERT_SRC_CUDA_PLACEMENT_H

#include "backends/cuda/device_op.h"

#include <map>
#include <vector>

namespace moert::cuda {

/// Steps whose CPU kernels read only their inputs' shapes, never the data.
bool readsShapesOnly(fb::OpKind op);

/// Whether `step` names a compiler-generated kernel (FusedElementwise).
bool hasGeneratedKernel(const detail::StepInfo &step);

/// Per step of `schedule`: the DeviceOp that runs it, or null (a step with a
/// generated kernel, or one that runs on the host). Exchanges run on the GPU
/// only over NCCL (`nccl`).
std::vector<const DeviceOp *>
chooseDeviceOps(const detail::ScheduleInfo &schedule, bool nccl);

/// Whether every step on the host (onGpu[i] false) computes from sizes and
/// weights only (Dim/Shape/Size and what follows from them) and none makes a
/// graph output: then a CUDA graph per binding of the symbols may skip them.
/// When `uploads` is given, it receives the host results that GPU steps read
/// with their offsets in a block of `*uploadBytes` (64-byte aligned slots of
/// each tensor's bound).
bool hostStepsReadOnlySizes(const detail::ScheduleInfo &schedule,
                            const std::vector<bool> &onGpu,
                            std::map<int32_t, uint64_t> *uploads = nullptr,
                            uint64_t *uploadBytes = nullptr);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_PLACEMENT_H
