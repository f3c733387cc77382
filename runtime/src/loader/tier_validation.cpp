//===- tier_validation.cpp - Load-time checks of expert tiers -------------===//
//
// The loader's checks of a tiered schedule (format 1.5,
// docs/tiered-experts.md): which weights are paged, which Experts steps read
// them, the experts' ranks and checksums, and a generation plan's prefill
// sharing its decode's tiers.
//
//===----------------------------------------------------------------------===//

#include "loader/tier_validation.h"

#include "format/plan_file.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <map>
#include <set>

namespace moert::detail {

namespace {

/// A prefill schedule's tiers, taken from its device's tiered `decode`
/// schedule: each tiered layer of the decode is read by exactly one Experts
/// step of the prefill, whose paged inputs are the layer's (the same input
/// positions and bytes of the file), and no other prefill step reads a
/// paged weight. The prefill's layer l is the decode's layer l, so that one
/// expert cache serves both schedules.
absl::Status deriveSharedTiers(const Diag &diag, const ScheduleInfo &decode,
                               ScheduleInfo &prefill) {
  detail::TierInfo &tiers = prefill.tiers;
  bool anyPaged = false;
  for (const TensorInfo &t : prefill.tensors)
    anyPaged |= t.paged;
  if (!anyPaged) {
    if (decode.tiers.present)
      return diag.invalid("the decode schedule is tiered but the prefill "
                          "schedule reads no paged expert weights");
    return absl::OkStatus();
  }
  // The decode layer each of its paged inputs belongs to.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint32_t, int>> owner;
  for (uint32_t l = 0; l < decode.tiers.layers.size(); ++l)
    for (const detail::PagedInput &input : decode.tiers.layers[l].inputs)
      owner[{input.fileOffset, input.expertBytes}] = {l, input.input};
  tiers.present = true;
  tiers.budget = decode.tiers.budget;
  tiers.hotCount = decode.tiers.hotCount;
  tiers.totalExperts = decode.tiers.totalExperts;
  tiers.prefetch = decode.tiers.prefetch;
  tiers.layers.resize(decode.tiers.layers.size());
  for (const StepInfo &step : prefill.steps) {
    int32_t layer = -1;
    size_t paged = 0;
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      int32_t id = step.inputs[i];
      if (id < 0 || !prefill.tensors[id].paged)
        continue;
      const TensorInfo &t = prefill.tensors[id];
      auto it = owner.end();
      if (step.op == fb::OpKind::Experts && i >= 2 && t.rank >= 1 &&
          t.dims[0].bound >= 1)
        it = owner.find({t.fileOffset, t.size / t.dims[0].bound});
      if (it == owner.end() || it->second.second != static_cast<int>(i) ||
          (layer >= 0 && layer != static_cast<int32_t>(it->second.first)))
        return diag.invalid(step.label, " reads paged weight '", t.name,
                            "' as input ", i,
                            ", which is no input of the decode schedule's "
                            "tiered layers at that position");
      layer = static_cast<int32_t>(it->second.first);
      ++paged;
    }
    if (layer < 0)
      continue;
    const detail::TierLayerInfo &shared = decode.tiers.layers[layer];
    detail::TierLayerInfo &own = tiers.layers[layer];
    if (paged != shared.inputs.size())
      return diag.invalid(
          step.label, " reads ", paged, " of the ", shared.inputs.size(),
          " paged inputs of the decode schedule's tiered layer ", layer);
    tiers.layerOfStep[step.index] = layer;
    // A later micro-batch's step of the layer.
    if (own.step >= 0) {
      for (const detail::PagedInput &input : own.inputs)
        if (step.inputs[input.input] != input.tensor)
          return diag.invalid(step.label, " does not read the paged weights ",
                              "of the other steps of tiered layer ", layer);
      own.moreSteps.push_back(step.index);
      continue;
    }
    own = shared;
    own.step = step.index;
    own.moreSteps.clear();
    for (detail::PagedInput &input : own.inputs)
      input.tensor = step.inputs[input.input];
  }
  for (uint32_t l = 0; l < tiers.layers.size(); ++l)
    if (tiers.layers[l].step < 0)
      return diag.invalid("no Experts step reads the experts of the decode "
                          "schedule's tiered layer ",
                          l);
  return absl::OkStatus();
}

} // namespace

absl::Status validateTiers(const Diag &diag, const Plan::Impl &impl,
                           const fb::Schedule &fbSched, ScheduleInfo &schedule,
                           const ScheduleInfo *decode) {
  detail::TierInfo &tiers = schedule.tiers;
  tiers.layerOfStep.assign(schedule.steps.size(), -1);
  const fb::ExpertTiers *table = fbSched.tiers();
  std::vector<int> uses(schedule.tensors.size(), 0);
  for (const StepInfo &step : schedule.steps)
    for (int32_t id : step.inputs)
      if (id >= 0)
        ++uses[id];
  std::set<std::pair<uint32_t, uint64_t>> seen;
  for (uint32_t id = 0; id < schedule.tensors.size(); ++id) {
    const TensorInfo &t = schedule.tensors[id];
    if (t.isWeight && !t.paged && seen.insert({t.section, t.offset}).second)
      tiers.residentBytes += t.size;
    if (!t.paged)
      continue;
    if (!table && !(decode && decode->tiers.present))
      return diag.invalid("weight '", t.name, "' lies in paged section ",
                          t.section, " but the schedule has no expert tiers");
    if (t.isGraphOutput || uses[id] < 1)
      return diag.invalid("paged weight '", t.name, "' (section ", t.section,
                          ") must be read by the step inputs of one tiered "
                          "layer's Experts steps only");
  }
  uint32_t topK = 0;
  for (const StepInfo &step : schedule.steps)
    if (step.op == fb::OpKind::Router)
      topK = std::max<uint32_t>(
          topK,
          static_cast<uint32_t>(step.fb->attrs_as_RouterAttrs()->top_k()));
  tiers.topK = topK ? topK : 2;
  if (decode) {
    if (table)
      return diag.invalid("a prefill schedule has no expert tiers of its own; "
                          "it pages its decode schedule's experts");
    return deriveSharedTiers(diag, *decode, schedule);
  }
  if (!table)
    return absl::OkStatus();
  Diag tdiag = diag.nested("expert tiers");
  if (impl.versionMinor < detail::kFormatVersionMinorTiers)
    return tdiag.invalid("need format ", kFormatVersionMajor, ".",
                         detail::kFormatVersionMinorTiers,
                         ", but the file is version ", impl.versionMajor, ".",
                         impl.versionMinor);
  tiers.present = true;
  tiers.budget = table->budget();
  tiers.hotCount = table->hot_count();
  tiers.prefetch = table->prefetch();
  if (tiers.prefetch != fb::TierPrefetch::None) {
    if (static_cast<uint8_t>(tiers.prefetch) >
        static_cast<uint8_t>(fb::TierPrefetch::MAX))
      return tdiag.invalid("prefetch ", static_cast<int>(tiers.prefetch),
                           " is no read-ahead policy");
    if (impl.versionMinor < detail::kFormatVersionMinorTierPrefetch)
      return tdiag.invalid("a prefetch needs format ", kFormatVersionMajor, ".",
                           detail::kFormatVersionMinorTierPrefetch,
                           ", but the file is version ", impl.versionMajor, ".",
                           impl.versionMinor);
  }
  const auto *layers = table->layers();
  if (layers->size() == 0 || layers->size() > schedule.steps.size())
    return tdiag.invalid(layers->size(), " layers for ", schedule.steps.size(),
                         " steps");
  uint64_t total = 0;
  for (uint32_t l = 0; l < layers->size(); ++l) {
    const fb::TierLayer *fbLayer = layers->Get(l);
    Diag ldiag = tdiag.nested(absl::StrCat("layer ", l));
    // Makes step `index` (an Experts step of no other layer) one of l's.
    auto claimStep = [&](uint32_t index) -> absl::Status {
      if (index >= schedule.steps.size() ||
          schedule.steps[index].op != fb::OpKind::Experts)
        return ldiag.invalid("step ", index, " is not an Experts step");
      const auto *ffn = schedule.steps[index].fb->attrs_as<fb::FfnAttrs>();
      if (ffn && ffn->block_quant())
        return ldiag.invalid("step ", index,
                             " has block-quantized matrices, which tiers do "
                             "not page");
      if (tiers.layerOfStep[index] >= 0)
        return ldiag.invalid("step ", index, " is tiered twice");
      tiers.layerOfStep[index] = static_cast<int32_t>(l);
      return absl::OkStatus();
    };
    uint32_t index = fbLayer->step();
    MOERT_RETURN_IF_ERROR(claimStep(index));
    const StepInfo &step = schedule.steps[index];
    detail::TierLayerInfo layer;
    layer.step = static_cast<int32_t>(index);
    const TensorInfo &w1 = schedule.tensors[step.inputs[2]];
    if (w1.rank < 1 || w1.dims[0].bound < 1 ||
        static_cast<uint64_t>(w1.dims[0].bound) > (uint64_t{1} << 24))
      return ldiag.invalid(step.label, ": w1 ", describeDims(w1),
                           " has no expert dimension in [1, 2^24]");
    layer.experts = static_cast<uint32_t>(w1.dims[0].bound);
    for (size_t i = 2; i < step.inputs.size(); ++i) {
      int32_t id = step.inputs[i];
      if (id < 0 || !schedule.tensors[id].paged)
        continue;
      const TensorInfo &t = schedule.tensors[id];
      if (t.rank < 1 || t.dims[0].bound != w1.dims[0].bound)
        return ldiag.invalid(step.label, ": paged input ", i, " '", t.name,
                             "' ", describeDims(t), " does not have the ",
                             layer.experts, " experts first");
      detail::PagedInput input;
      input.input = static_cast<int>(i);
      input.tensor = id;
      input.section = t.section;
      input.fileOffset = t.fileOffset;
      input.expertBytes = t.size / layer.experts;
      layer.expertBytes += input.expertBytes;
      layer.inputs.push_back(input);
    }
    if (layer.inputs.empty())
      return ldiag.invalid(step.label, " reads no paged weight");
    if (const auto *more = fbLayer->more_steps(); more && more->size()) {
      if (impl.versionMinor < detail::kFormatVersionMinorMicroBatchTiers)
        return ldiag.invalid("has more steps, which need format ",
                             kFormatVersionMajor, ".",
                             detail::kFormatVersionMinorMicroBatchTiers,
                             ", but the file is version ", impl.versionMajor,
                             ".", impl.versionMinor);
      for (uint32_t other : *more) {
        MOERT_RETURN_IF_ERROR(claimStep(other));
        const StepInfo &next = schedule.steps[other];
        for (size_t i = 2; i < std::max(step.inputs.size(), next.inputs.size());
             ++i) {
          int32_t a = i < step.inputs.size() ? step.inputs[i] : -1;
          int32_t b = i < next.inputs.size() ? next.inputs[i] : -1;
          bool paged = (a >= 0 && schedule.tensors[a].paged) ||
                       (b >= 0 && schedule.tensors[b].paged);
          if (paged && a != b)
            return ldiag.invalid(next.label, " does not read ", step.label,
                                 "'s paged weights at input ", i);
        }
        layer.moreSteps.push_back(static_cast<int32_t>(other));
      }
    }
    for (int32_t id : step.inputs)
      if (id >= 0 && schedule.tensors[id].paged &&
          std::count(step.inputs.begin(), step.inputs.end(), id) != 1)
        return ldiag.invalid(step.label, " reads paged weight '",
                             schedule.tensors[id].name, "' twice");
    const auto *rank = fbLayer->rank();
    const auto *crc = fbLayer->crc();
    if (rank->size() != layer.experts ||
        crc->size() != uint64_t{layer.experts} * layer.inputs.size())
      return ldiag.invalid("has ", rank->size(), " ranks and ", crc->size(),
                           " checksums; expected ", layer.experts, " and ",
                           uint64_t{layer.experts} * layer.inputs.size(), " (",
                           layer.experts, " experts, ", layer.inputs.size(),
                           " paged inputs)");
    layer.rank.assign(rank->begin(), rank->end());
    layer.crc.assign(crc->begin(), crc->end());
    total += layer.experts;
    tiers.layers.push_back(std::move(layer));
  }
  for (uint32_t id = 0; id < schedule.tensors.size(); ++id) {
    const TensorInfo &t = schedule.tensors[id];
    if (!t.paged)
      continue;
    // Every reader is a step of one tiered layer, and each of its steps
    // reads it once.
    bool tiered = true;
    int32_t layer = -1;
    for (const StepInfo &step : schedule.steps)
      for (size_t i = 0; i < step.inputs.size(); ++i)
        if (step.inputs[i] == static_cast<int32_t>(id)) {
          int32_t of = tiers.layerOfStep[step.index];
          tiered &= i >= 2 && of >= 0 && (layer < 0 || of == layer);
          layer = of;
        }
    if (!tiered || layer < 0 ||
        uses[id] != 1 + static_cast<int>(tiers.layers[layer].moreSteps.size()))
      return tdiag.invalid("paged weight '", t.name,
                           "' is read by a step that is no tiered layer, or "
                           "not once by each step of its layer");
  }
  if (total > UINT32_MAX)
    return tdiag.invalid(total, " experts in all");
  tiers.totalExperts = static_cast<uint32_t>(total);
  std::vector<char> ranked(total, 0);
  for (const detail::TierLayerInfo &layer : tiers.layers)
    for (uint32_t r : layer.rank) {
      if (r >= total || ranked[r])
        return tdiag.invalid("the experts' ranks are not a permutation of [0, ",
                             total, "): rank ", r,
                             " is out of range or repeated");
      ranked[r] = 1;
    }
  if (tiers.hotCount > total)
    return tdiag.invalid("hot count ", tiers.hotCount, " exceeds the ", total,
                         " experts");
  return absl::OkStatus();
}

} // namespace moert::detail
