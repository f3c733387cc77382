//===- kv_cache_in_place.cpp - KV caches written in place
//--------------------===//

#include "exec/kv_cache_in_place.h"

#include "exec/ops.h"

#include "absl/strings/str_cat.h"

namespace moert::detail {

namespace {

/// The normalised axis of a Concat step whose first input has `rank`
/// dimensions, or -1.
int concatAxis(const StepInfo &step, int rank) {
  const auto *attrs = step.fb->attrs_as<fb::AxisAttrs>();
  int axis = -1;
  if (!attrs || !normalizeAxis(attrs->axis(), rank, axis))
    return -1;
  return axis;
}

} // namespace

bool cacheViewUse(const StepInfo &step, int input, int axis) {
  switch (step.op) {
  case fb::OpKind::Shape:
  case fb::OpKind::Size:
  case fb::OpKind::Dim:
    return true;
  case fb::OpKind::Attention:
    // Keys and values [batch, heads, positions, dim]: the kernel reads them
    // with a row pitch along the positions.
    return (input == 1 || input == 2) && axis == 2;
  case fb::OpKind::Concat:
    return input == 0;
  default:
    return false;
  }
}

std::string cacheInPlaceBlocker(const ScheduleInfo &schedule, int32_t past,
                                int32_t present, int axis) {
  const TensorInfo &pastInfo = schedule.tensors[past];
  const TensorInfo &presentInfo = schedule.tensors[present];
  if (pastInfo.dtype != DType::F32 || presentInfo.dtype != DType::F32)
    return "the cache is not f32";
  if (pastInfo.isGraphOutput)
    return "the past is also a graph output";
  if (presentInfo.isGraphInput || presentInfo.producer < 0)
    return "the present is not computed by a step";
  const StepInfo &append = schedule.steps[presentInfo.producer];
  if (append.op != fb::OpKind::Concat || append.inputs.size() < 2 ||
      append.inputs[0] != past || concatAxis(append, pastInfo.rank) != axis)
    return absl::StrCat("the present is computed by ", append.label,
                        ", not a Concat of the past and new positions along "
                        "axis ",
                        axis);
  for (const StepInfo &step : schedule.steps) {
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      int32_t id = step.inputs[i];
      if (id != past && id != present)
        continue;
      bool ok = id == past ? (&step == &append && i == 0) ||
                                 (step.op != fb::OpKind::Concat &&
                                  cacheViewUse(step, static_cast<int>(i), axis))
                           : step.op != fb::OpKind::Concat &&
                                 cacheViewUse(step, static_cast<int>(i), axis);
      if (!ok)
        return absl::StrCat(step.label, " reads the ",
                            id == past ? "past" : "present", " '",
                            schedule.tensors[id].name, "' as input ", i);
    }
  }
  return "";
}

} // namespace moert::detail
