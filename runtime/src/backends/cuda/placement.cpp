//===- placement.cpp - Which steps the CUDA backend runs where ------------===//

#include "backends/cuda/placement.h"

#include "format/plan_file.h"
#include "loader/plan_impl.h"
#include "moert/cuda.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace moert::cuda {

using detail::ScheduleInfo;
using detail::StepInfo;

bool readsShapesOnly(fb::OpKind op) {
  return op == fb::OpKind::Dim || op == fb::OpKind::Shape ||
         op == fb::OpKind::Size;
}

bool hasGeneratedKernel(const StepInfo &step) {
  return step.op == fb::OpKind::FusedElementwise && step.fb->kernel() &&
         step.fb->kernel()->size() > 0;
}

std::vector<const DeviceOp *> chooseDeviceOps(const ScheduleInfo &schedule,
                                              bool nccl) {
  std::vector<const DeviceOp *> ops(schedule.steps.size(), nullptr);
  for (const StepInfo &step : schedule.steps) {
    if (hasGeneratedKernel(step))
      continue;
    const DeviceOp *op = deviceOpFor(step.op);
    if (!op || (op->accepts && !op->accepts(step, schedule)))
      continue;
    // Exchanges over a host communicator take host buffers.
    if (detail::isExchange(step.op) && !nccl)
      continue;
    ops[step.index] = op;
  }
  return ops;
}

bool hostStepsReadOnlySizes(const ScheduleInfo &schedule,
                            const std::vector<bool> &onGpu,
                            std::map<int32_t, uint64_t> *uploads,
                            uint64_t *uploadBytes) {
  std::vector<uint8_t> sizeDerived(schedule.tensors.size(), 0);
  std::vector<uint8_t> fromHost(schedule.tensors.size(), 0);
  for (size_t id = 0; id < schedule.tensors.size(); ++id)
    sizeDerived[id] = schedule.tensors[id].isWeight;
  for (const StepInfo &step : schedule.steps) {
    if (onGpu[step.index]) {
      if (uploads)
        for (int32_t id : step.inputs)
          if (id >= 0 && fromHost[id] && !uploads->count(id)) {
            (*uploads)[id] = *uploadBytes;
            *uploadBytes += detail::alignTo(
                std::max<uint64_t>(schedule.tensors[id].size, 1), 64);
          }
      continue;
    }
    bool derived = readsShapesOnly(step.op);
    if (!derived) {
      derived = true;
      for (int32_t id : step.inputs)
        derived &= id < 0 || sizeDerived[id];
    }
    if (!derived)
      return false;
    for (int32_t id : step.outputs) {
      if (schedule.tensors[id].isGraphOutput)
        return false;
      sizeDerived[id] = fromHost[id] = 1;
    }
  }
  return true;
}

} // namespace moert::cuda

namespace moert {

absl::StatusOr<CudaPlacement> cudaPlacement(const Plan &plan, int device,
                                            bool nccl) {
  const Plan::Impl &impl = plan.impl();
  if (device < 0 || device >= plan.numDevices())
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, " is not in [0, ", plan.numDevices(), ")"));
  const detail::ScheduleInfo &schedule = impl.schedules[device];
  std::vector<const cuda::DeviceOp *> ops =
      cuda::chooseDeviceOps(schedule, nccl);
  CudaPlacement placement;
  placement.onGpu.resize(schedule.steps.size());
  for (const detail::StepInfo &step : schedule.steps) {
    placement.steps.push_back(step.label);
    placement.onGpu[step.index] =
        cuda::hasGeneratedKernel(step) || ops[step.index] != nullptr;
  }
  // A tiered step waits for its routing on the host: no graphs.
  placement.graphs = !nccl && !schedule.steps.empty() &&
                     !schedule.tiers.present &&
                     cuda::hostStepsReadOnlySizes(schedule, placement.onGpu);
  return placement;
}

} // namespace moert
