//===- stats.cpp - Per-layer MoE statistics of a session ------------------===//

#include "moert/stats.h"

#include "format/byte_image.h"
#include "loader/plan_impl.h"
#include "observe/layer_stats.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>

namespace moert {

using detail::ScheduleInfo;
using detail::StepInfo;
using detail::TensorInfo;

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

double MoeLayerStats::deviceImbalance() const {
  return loadImbalance(deviceRows);
}

namespace {

/// The first step of one of `ops` that reads tensor `tensor` as its input
/// `input`, or -1.
int consumer(const ScheduleInfo &schedule, int32_t tensor, size_t input,
             std::initializer_list<fb::OpKind> ops) {
  if (tensor < 0)
    return -1;
  for (const StepInfo &step : schedule.steps)
    if (std::find(ops.begin(), ops.end(), step.op) != ops.end() &&
        input < step.inputs.size() && step.inputs[input] == tensor)
      return step.index;
  return -1;
}

/// The step producing `tensor` when it is one of `ops`, or -1.
int producer(const ScheduleInfo &schedule, int32_t tensor,
             std::initializer_list<fb::OpKind> ops) {
  if (tensor < 0)
    return -1;
  int32_t index = schedule.tensors[tensor].producer;
  if (index < 0)
    return -1;
  fb::OpKind op = schedule.steps[index].op;
  return std::find(ops.begin(), ops.end(), op) != ops.end() ? index : -1;
}

/// The Router or AssignSlots step whose indices reach `tensor`, directly or
/// through steps that only reshape or slice them (exports flatten [B, S, k]
/// indices to [B * S, k] before the dispatch; micro-batches slice them), or
/// -1.
int indicesSource(const ScheduleInfo &schedule, int32_t tensor) {
  while (tensor >= 0) {
    int32_t producer = schedule.tensors[tensor].producer;
    if (producer < 0)
      return -1;
    const StepInfo &step = schedule.steps[producer];
    switch (step.op) {
    case fb::OpKind::Router:
    case fb::OpKind::AssignSlots:
      return step.index;
    case fb::OpKind::Reshape:
    case fb::OpKind::Flatten:
    case fb::OpKind::Squeeze:
    case fb::OpKind::Unsqueeze:
    case fb::OpKind::Identity:
    case fb::OpKind::Slice:
      tensor = step.inputs.empty() ? -1 : step.inputs[0];
      break;
    default:
      return -1;
    }
  }
  return -1;
}

/// The first global slot of this device: the sum of the slot counts of the
/// devices before it, read from the constant send counts [S_0, ..., S_N-1]
/// of the counts exchange that feeds `regroup`'s slot counts (through the
/// Gather that keeps this device's part); -1 when the schedule does not
/// have that shape.
int64_t firstSlot(const ScheduleInfo &schedule, const StepInfo &regroup,
                  int device) {
  int32_t tensor = regroup.inputs.size() > 1 ? regroup.inputs[1] : -1;
  int gather = producer(schedule, tensor, {fb::OpKind::Gather});
  if (gather >= 0)
    tensor = schedule.steps[gather].inputs[0];
  int exchange = producer(schedule, tensor, {fb::OpKind::AllToAll});
  if (exchange < 0 || schedule.steps[exchange].inputs.size() < 2)
    return -1;
  const TensorInfo &counts =
      schedule.tensors[schedule.steps[exchange].inputs[1]];
  if (!counts.isWeight || !counts.weightData || counts.dtype != DType::I64 ||
      counts.size < sizeof(int64_t) * (device + 1))
    return -1;
  int64_t first = 0;
  for (int d = 0; d < device; ++d) {
    int64_t count;
    std::memcpy(&count, counts.weightData + d * sizeof(int64_t), sizeof(count));
    first += count;
  }
  return first;
}

void addInto(std::vector<uint64_t> &sum, const std::vector<uint64_t> &add) {
  if (sum.size() < add.size())
    sum.resize(add.size(), 0);
  for (size_t i = 0; i < add.size(); ++i)
    sum[i] += add[i];
}

/// Adds the times of the layer's steps: every one to layerSeconds, the
/// Experts steps to expertsSeconds, the exchanges to commSeconds.
void addTimes(const ScheduleInfo &schedule, const std::vector<StepStats> &steps,
              MoeLayerStats &layer) {
  std::sort(layer.steps.begin(), layer.steps.end());
  layer.steps.erase(std::unique(layer.steps.begin(), layer.steps.end()),
                    layer.steps.end());
  for (int index : layer.steps) {
    double seconds = steps[index].totalSeconds;
    layer.layerSeconds += seconds;
    switch (schedule.steps[index].op) {
    case fb::OpKind::Experts:
      layer.expertsSeconds += seconds;
      if (steps[index].tiered) {
        layer.tiered = true;
        layer.cache.add(steps[index].cache);
      }
      break;
    case fb::OpKind::AllToAll:
    case fb::OpKind::AllToAllStart:
    case fb::OpKind::AllToAllWait:
      layer.commSeconds += seconds;
      break;
    default:
      break;
    }
  }
}

/// The layer of a single-device schedule around Dispatch step `dispatch`.
MoeLayerStats denseLayer(const ScheduleInfo &schedule,
                         const std::vector<StepStats> &steps,
                         const StepInfo &dispatch) {
  MoeLayerStats layer;
  layer.name = std::string(dispatch.name);
  layer.dispatch = dispatch.index;
  // Dispatch(tokens, indices) -> (rows, offsets, source).
  layer.router = indicesSource(schedule, dispatch.inputs[1]);
  layer.experts =
      consumer(schedule, dispatch.outputs[1], 1, {fb::OpKind::Experts});
  layer.combine =
      consumer(schedule, dispatch.outputs[2], 1, {fb::OpKind::Combine});
  layer.sharedExpert =
      consumer(schedule, dispatch.inputs[0], 0, {fb::OpKind::SharedExpert});

  layer.runs = steps[layer.dispatch].calls;
  if (layer.router >= 0)
    layer.droppedAssignments = steps[layer.router].droppedAssignments;
  if (layer.experts >= 0)
    layer.tokensPerExpert = steps[layer.experts].expertLoad;
  else if (layer.router >= 0)
    layer.tokensPerExpert = steps[layer.router].expertLoad;
  for (int index : {layer.router, layer.dispatch, layer.experts,
                    layer.sharedExpert, layer.combine})
    if (index >= 0)
      layer.steps.push_back(index);
  addTimes(schedule, steps, layer);
  return layer;
}

/// The layer of an expert-parallel schedule (device `device`) around its
/// AssignSlots step `assign`: per micro-batch, Dispatch -> exchange ->
/// Regroup -> Experts -> Ungroup -> exchange -> Combine.
MoeLayerStats expertParallelLayer(const ScheduleInfo &schedule,
                                  const std::vector<StepStats> &steps,
                                  const StepInfo &assign, int device) {
  MoeLayerStats layer;
  layer.assignSlots = assign.index;
  layer.router = indicesSource(schedule, assign.inputs[0]);
  layer.steps.push_back(assign.index);
  if (layer.router >= 0) {
    layer.steps.push_back(layer.router);
    layer.routedPerExpert = steps[layer.router].expertLoad;
    layer.droppedAssignments = steps[layer.router].droppedAssignments;
  }

  // Slot -> expert, from the AssignSlots attributes (validated at load).
  const auto *attrs = assign.fb->attrs_as_SlotAttrs();
  const auto &offsets = *attrs->expert_slot_offsets();
  const auto &slots = *attrs->expert_slots();
  size_t numExperts = offsets.size() - 1;
  std::vector<int64_t> slotExpert(slots.size(), -1);
  for (size_t e = 0; e < numExperts; ++e)
    for (int64_t i = offsets.Get(e); i < offsets.Get(e + 1); ++i)
      slotExpert[slots.Get(i)] = static_cast<int64_t>(e);
  layer.tokensPerExpert.assign(numExperts, 0);

  bool mapped = true;
  for (const StepInfo &step : schedule.steps) {
    if (step.op != fb::OpKind::Dispatch ||
        indicesSource(schedule, step.inputs[1]) != assign.index)
      continue;
    if (layer.dispatch < 0) {
      layer.dispatch = step.index;
      layer.name = std::string(step.name);
      layer.runs = steps[step.index].calls;
    }
    layer.steps.push_back(step.index);
    int combine = consumer(schedule, step.outputs[2], 1, {fb::OpKind::Combine});
    int shared =
        consumer(schedule, step.inputs[0], 0, {fb::OpKind::SharedExpert});
    // The rows go out through one exchange and come home through another,
    // which feeds the Combine.
    int out = consumer(schedule, step.outputs[0], 0,
                       {fb::OpKind::AllToAll, fb::OpKind::AllToAllStart});
    int back =
        combine < 0
            ? -1
            : producer(schedule, schedule.steps[combine].inputs[0],
                       {fb::OpKind::AllToAll, fb::OpKind::AllToAllStart});
    int regroup = out < 0 ? -1
                          : consumer(schedule, schedule.steps[out].outputs[0],
                                     0, {fb::OpKind::Regroup});
    int experts = regroup < 0
                      ? -1
                      : consumer(schedule, schedule.steps[regroup].outputs[1],
                                 1, {fb::OpKind::Experts});
    int ungroup = experts < 0
                      ? -1
                      : consumer(schedule, schedule.steps[experts].outputs[0],
                                 0, {fb::OpKind::Ungroup});
    for (int index : {combine, shared, out, back, regroup, experts, ungroup})
      if (index >= 0)
        layer.steps.push_back(index);
    if (layer.combine < 0)
      layer.combine = combine;
    if (layer.sharedExpert < 0)
      layer.sharedExpert = shared;
    for (const StepInfo &wait : schedule.steps)
      if (wait.op == fb::OpKind::AllToAllWait && wait.pairedStep >= 0 &&
          (wait.pairedStep == out || wait.pairedStep == back))
        layer.steps.push_back(wait.index);
    if (regroup >= 0) {
      // The counts exchange that sized the Regroup belongs to the layer too.
      int gather = producer(schedule, schedule.steps[regroup].inputs[1],
                            {fb::OpKind::Gather});
      int counts = producer(schedule,
                            gather >= 0 ? schedule.steps[gather].inputs[0]
                                        : schedule.steps[regroup].inputs[1],
                            {fb::OpKind::AllToAll});
      if (counts >= 0)
        layer.steps.push_back(counts);
    }
    if (experts < 0)
      continue;
    if (layer.experts < 0)
      layer.experts = experts;
    const std::vector<uint64_t> &load = steps[experts].expertLoad;
    addInto(layer.tokensPerSlot, load);
    int64_t first = firstSlot(schedule, schedule.steps[regroup], device);
    if (first < 0 || first + load.size() > slotExpert.size()) {
      mapped = false;
      continue;
    }
    if (layer.slotExperts.empty())
      layer.slotExperts.assign(slotExpert.begin() + first,
                               slotExpert.begin() + first + load.size());
    for (size_t s = 0; s < load.size(); ++s)
      layer.tokensPerExpert[slotExpert[first + s]] += load[s];
  }
  // Slots that cannot be mapped to experts leave the per-expert rows unknown
  // rather than wrong.
  if (!mapped) {
    layer.tokensPerExpert.clear();
    layer.slotExperts.clear();
  }
  addTimes(schedule, steps, layer);
  return layer;
}

} // namespace

std::vector<MoeLayerStats> moeLayerStats(const Plan &plan,
                                         const std::vector<StepStats> &steps,
                                         int device, bool prefill) {
  const Plan::Impl &impl = plan.impl();
  const detail::ScheduleInfo *schedule = impl.deviceSchedule(device, prefill);
  if (!schedule)
    return {};
  return detail::scheduleLayerStats(*schedule, steps, device);
}

namespace detail {
std::vector<MoeLayerStats>
scheduleLayerStats(const ScheduleInfo &schedule,
                   const std::vector<StepStats> &steps, int device) {
  std::vector<MoeLayerStats> layers;
  // Statistics of another schedule (or none at all) cannot be grouped.
  if (steps.size() != schedule.steps.size())
    return layers;

  for (const StepInfo &step : schedule.steps) {
    if (step.op == fb::OpKind::AssignSlots) {
      layers.push_back(expertParallelLayer(schedule, steps, step, device));
      continue;
    }
    if (step.op != fb::OpKind::Dispatch)
      continue;
    // Dispatches of slots belong to their AssignSlots layer.
    int source = indicesSource(schedule, step.inputs[1]);
    if (source < 0 || schedule.steps[source].op != fb::OpKind::AssignSlots)
      layers.push_back(denseLayer(schedule, steps, step));
  }
  return layers;
}
} // namespace detail

absl::StatusOr<std::vector<MoeLayerStats>>
mergeDeviceLayerStats(const std::vector<std::vector<MoeLayerStats>> &devices) {
  std::vector<MoeLayerStats> merged;
  if (devices.empty())
    return merged;
  for (size_t d = 1; d < devices.size(); ++d)
    if (devices[d].size() != devices[0].size())
      return absl::InternalError(
          absl::StrCat("device ", d, " has ", devices[d].size(),
                       " MoE layers but device 0 has ", devices[0].size()));
  for (size_t i = 0; i < devices[0].size(); ++i) {
    MoeLayerStats layer;
    layer.name = devices[0][i].name;
    bool mapped = true;
    for (size_t d = 0; d < devices.size(); ++d) {
      const MoeLayerStats &part = devices[d][i];
      if (!layer.tokensPerExpert.empty() && !part.tokensPerExpert.empty() &&
          part.tokensPerExpert.size() != layer.tokensPerExpert.size())
        return absl::InternalError(
            absl::StrCat("MoE layer ", i, " has ", part.tokensPerExpert.size(),
                         " experts on device ", d, " but ",
                         layer.tokensPerExpert.size(), " on device 0"));
      mapped &= !part.tokensPerExpert.empty() || part.tokensPerSlot.empty();
      layer.runs = std::max(layer.runs, part.runs);
      addInto(layer.tokensPerExpert, part.tokensPerExpert);
      addInto(layer.routedPerExpert, part.routedPerExpert);
      layer.slotExperts.insert(layer.slotExperts.end(),
                               part.slotExperts.begin(),
                               part.slotExperts.end());
      layer.tokensPerSlot.insert(layer.tokensPerSlot.end(),
                                 part.tokensPerSlot.begin(),
                                 part.tokensPerSlot.end());
      layer.droppedAssignments += part.droppedAssignments;
      layer.tiered |= part.tiered;
      layer.cache.add(part.cache, /*maxSeconds=*/true);
      layer.expertsSeconds =
          std::max(layer.expertsSeconds, part.expertsSeconds);
      layer.commSeconds = std::max(layer.commSeconds, part.commSeconds);
      layer.layerSeconds = std::max(layer.layerSeconds, part.layerSeconds);
      uint64_t rows = 0;
      for (uint64_t count : part.tokensPerSlot)
        rows += count;
      layer.deviceRows.push_back(rows);
    }
    if (!mapped) {
      layer.tokensPerExpert.clear();
      layer.slotExperts.clear();
    }
    merged.push_back(std::move(layer));
  }
  return merged;
}

namespace {

/// Adds `more` seconds to `seconds`, or (`keepLarger`: devices that ran at
/// the same time) keeps the larger of the two.
void addSeconds(double &seconds, double more, bool keepLarger) {
  seconds = keepLarger ? std::max(seconds, more) : seconds + more;
}

} // namespace

void PrefetchStats::add(const PrefetchStats &o, bool maxSeconds) {
  issued += o.issued;
  used += o.used;
  late += o.late;
  bytes += o.bytes;
  addSeconds(readSeconds, o.readSeconds, maxSeconds);
  addSeconds(waitSeconds, o.waitSeconds, maxSeconds);
}

void ExpertCacheCounters::add(const ExpertCacheCounters &o, bool maxSeconds) {
  hits += o.hits;
  misses += o.misses;
  bytesPagedIn += o.bytesPagedIn;
  rounds += o.rounds;
  addSeconds(readSeconds, o.readSeconds, maxSeconds);
  addSeconds(waitSeconds, o.waitSeconds, maxSeconds);
  prefetch.add(o.prefetch, maxSeconds);
}

using detail::ByteReader;
using detail::ByteWriter;

std::vector<uint8_t>
serializeLayerStats(const std::vector<MoeLayerStats> &layers) {
  ByteWriter out;
  out.word(layers.size());
  for (const MoeLayerStats &l : layers) {
    out.text(l.name);
    for (int index : {l.router, l.assignSlots, l.dispatch, l.experts, l.combine,
                      l.sharedExpert})
      out.word(static_cast<uint64_t>(static_cast<int64_t>(index)));
    out.words(l.steps);
    out.word(l.runs);
    out.words(l.tokensPerExpert);
    out.words(l.routedPerExpert);
    out.words(l.slotExperts);
    out.words(l.tokensPerSlot);
    out.word(l.droppedAssignments);
    out.real(l.expertsSeconds);
    out.real(l.commSeconds);
    out.real(l.layerSeconds);
    out.words(l.deviceRows);
    out.word(l.tiered);
    out.word(l.cache.hits);
    out.word(l.cache.misses);
    out.word(l.cache.bytesPagedIn);
    out.real(l.cache.readSeconds);
    out.real(l.cache.waitSeconds);
    out.word(l.cache.rounds);
    const PrefetchStats &ahead = l.cache.prefetch;
    for (uint64_t count : {ahead.issued, ahead.used, ahead.late, ahead.bytes})
      out.word(count);
    out.real(ahead.readSeconds);
    out.real(ahead.waitSeconds);
  }
  return out.take();
}

absl::StatusOr<std::vector<MoeLayerStats>>
deserializeLayerStats(const uint8_t *data, size_t size) {
  ByteReader in(data, size);
  uint64_t count = in.word();
  std::vector<MoeLayerStats> layers;
  for (uint64_t i = 0; in.ok() && i < count; ++i) {
    MoeLayerStats l;
    l.name = in.text();
    for (int *index : {&l.router, &l.assignSlots, &l.dispatch, &l.experts,
                       &l.combine, &l.sharedExpert})
      *index = static_cast<int>(static_cast<int64_t>(in.word()));
    l.steps = in.words<int>();
    l.runs = in.word();
    l.tokensPerExpert = in.words<uint64_t>();
    l.routedPerExpert = in.words<uint64_t>();
    l.slotExperts = in.words<int64_t>();
    l.tokensPerSlot = in.words<uint64_t>();
    l.droppedAssignments = in.word();
    l.expertsSeconds = in.real();
    l.commSeconds = in.real();
    l.layerSeconds = in.real();
    l.deviceRows = in.words<uint64_t>();
    l.tiered = in.word() != 0;
    l.cache.hits = in.word();
    l.cache.misses = in.word();
    l.cache.bytesPagedIn = in.word();
    l.cache.readSeconds = in.real();
    l.cache.waitSeconds = in.real();
    l.cache.rounds = in.word();
    PrefetchStats &ahead = l.cache.prefetch;
    for (uint64_t *count :
         {&ahead.issued, &ahead.used, &ahead.late, &ahead.bytes})
      *count = in.word();
    ahead.readSeconds = in.real();
    ahead.waitSeconds = in.real();
    layers.push_back(std::move(l));
  }
  if (!in.ok() || !in.done())
    return absl::DataLossError("gathered MoE layer stats are malformed");
  return layers;
}

} // namespace moert
