//===- stats.cpp - Per-layer MoE statistics of a session ------------------===//

#include "moert/stats.h"

#include "plan_impl.h"

#include <algorithm>

namespace moert {

using detail::ScheduleInfo;
using detail::StepInfo;

uint64_t MoeLayerStats::keptAssignments() const {
  uint64_t total = 0;
  for (uint64_t load : tokensPerExpert)
    total += load;
  return total;
}

double loadImbalance(const std::vector<uint64_t> &loads) {
  uint64_t total = 0, max = 0;
  for (uint64_t load : loads) {
    total += load;
    max = std::max(max, load);
  }
  return total ? double(max) * loads.size() / double(total) : 0.0;
}

double MoeLayerStats::imbalance() const {
  return loadImbalance(tokensPerExpert);
}

namespace {

/// The first step of kind `op` that reads tensor `tensor` as its input
/// `input`, or -1.
int consumer(const ScheduleInfo &schedule, int32_t tensor, fb::OpKind op,
             size_t input) {
  if (tensor < 0)
    return -1;
  for (const StepInfo &step : schedule.steps)
    if (step.op == op && input < step.inputs.size() &&
        step.inputs[input] == tensor)
      return step.index;
  return -1;
}

/// The Router step whose indices reach `tensor`, directly or through steps
/// that only reshape them (exports flatten [B, S, k] indices to [B * S, k]
/// before the dispatch), or -1.
int routerOf(const ScheduleInfo &schedule, int32_t tensor) {
  while (tensor >= 0) {
    int32_t producer = schedule.tensors[tensor].producer;
    if (producer < 0)
      return -1;
    const StepInfo &step = schedule.steps[producer];
    switch (step.op) {
    case fb::OpKind::Router:
      return step.index;
    case fb::OpKind::Reshape:
    case fb::OpKind::Flatten:
    case fb::OpKind::Squeeze:
    case fb::OpKind::Unsqueeze:
    case fb::OpKind::Identity:
      tensor = step.inputs.empty() ? -1 : step.inputs[0];
      break;
    default:
      return -1;
    }
  }
  return -1;
}

} // namespace

std::vector<MoeLayerStats> moeLayerStats(const Plan &plan,
                                         const std::vector<StepStats> &steps,
                                         int device) {
  std::vector<MoeLayerStats> layers;
  const auto &schedules = plan.impl().schedules;
  if (device < 0 || device >= static_cast<int>(schedules.size()))
    return layers;
  const ScheduleInfo &schedule = schedules[device];
  // Statistics of another schedule (or none at all) cannot be grouped.
  if (steps.size() != schedule.steps.size())
    return layers;

  for (const StepInfo &step : schedule.steps) {
    if (step.op != fb::OpKind::Dispatch)
      continue;
    MoeLayerStats layer;
    layer.name = std::string(step.name);
    layer.dispatch = step.index;
    // Dispatch(tokens, indices) -> (rows, offsets, source).
    layer.router = routerOf(schedule, step.inputs[1]);
    layer.experts = consumer(schedule, step.outputs[1], fb::OpKind::Experts, 1);
    layer.combine = consumer(schedule, step.outputs[2], fb::OpKind::Combine, 1);
    layer.sharedExpert =
        consumer(schedule, step.inputs[0], fb::OpKind::SharedExpert, 0);

    layer.runs = steps[layer.dispatch].calls;
    if (layer.router >= 0)
      layer.droppedAssignments = steps[layer.router].droppedAssignments;
    if (layer.experts >= 0) {
      layer.tokensPerExpert = steps[layer.experts].expertLoad;
      layer.expertsSeconds = steps[layer.experts].totalSeconds;
    } else if (layer.router >= 0) {
      layer.tokensPerExpert = steps[layer.router].expertLoad;
    }
    for (int index : {layer.router, layer.dispatch, layer.experts,
                      layer.sharedExpert, layer.combine})
      if (index >= 0)
        layer.layerSeconds += steps[index].totalSeconds;
    layers.push_back(std::move(layer));
  }
  return layers;
}

} // namespace moert
