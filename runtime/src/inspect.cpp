//===- inspect.cpp - Human- and tool-readable dumps of a plan -------------===//

#include "moert/inspect.h"

#include "expert_cache.h"
#include "plan_impl.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace moert {
namespace {

using detail::ScheduleInfo;
using detail::TensorInfo;

/// "[?<=64, 16]": static sizes, and bounds of symbolic (named) and dynamic
/// dimensions.
std::string shapeText(const Plan &plan, const TensorInfo &t) {
  std::vector<std::string> dims;
  for (int d = 0; d < t.rank; ++d) {
    const detail::DimInfo &dim = t.dims[d];
    switch (dim.kind) {
    case fb::DimKind::Static:
      dims.push_back(absl::StrCat(dim.bound));
      break;
    case fb::DimKind::Symbolic:
      dims.push_back(
          absl::StrCat(plan.symbols()[dim.symbol].name, "<=", dim.bound));
      break;
    default:
      dims.push_back(absl::StrCat("?<=", dim.bound));
    }
  }
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

std::string jsonString(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      absl::StrAppend(&out, "\\", std::string(1, c));
    else if (static_cast<unsigned char>(c) < 0x20)
      absl::StrAppendFormat(&out, "\\u%04x", c);
    else
      out.push_back(c);
  }
  return out + "\"";
}

std::string idList(const std::vector<int32_t> &ids) {
  return absl::StrJoin(ids, ", ");
}

uint64_t weightBytes(const ScheduleInfo &s) {
  uint64_t bytes = 0;
  for (const TensorInfo &t : s.tensors)
    bytes += t.isWeight ? t.size : 0;
  return bytes;
}

/// "0-3, 6": the indices of the set entries of `hot`, ranges joined.
std::string indexRanges(const std::vector<bool> &hot) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < hot.size();) {
    if (!hot[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j + 1 < hot.size() && hot[j + 1])
      ++j;
    parts.push_back(i == j ? absl::StrCat(i) : absl::StrCat(i, "-", j));
    i = j + 1;
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

} // namespace

std::string describeTiersText(const ExpertTiersDesc &t,
                              const std::string &indent) {
  std::string out = absl::StrFormat(
      "%stiers: budget %d bytes = resident weights %d + experts' cache %d "
      "(least %d); arena %d bytes besides\n%s  hot: %d experts, %d bytes; "
      "cold: %d experts, %d bytes\n",
      indent, t.budget, t.residentBytes, t.cacheBytes, t.windowBytes,
      t.arenaBytes, indent, t.hotExperts, t.hotBytes, t.coldExperts,
      t.coldBytes);
  for (const TierLayerDesc &layer : t.layers)
    absl::StrAppendFormat(&out,
                          "%s  step %d '%s': %d experts of %d bytes, hot %s\n",
                          indent, layer.stepIndex, layer.step, layer.experts,
                          layer.expertBytes, indexRanges(layer.hot));
  return out;
}

std::string describeTiersJson(const ExpertTiersDesc &t) {
  std::string out = absl::StrFormat(
      "{\"budget\": %d, \"resident_bytes\": %d, \"arena_bytes\": %d, "
      "\"cache_bytes\": %d, \"window_bytes\": %d, \"hot_experts\": %d, "
      "\"hot_bytes\": %d, \"cold_experts\": %d, \"cold_bytes\": %d, "
      "\"layers\": [",
      t.budget, t.residentBytes, t.arenaBytes, t.cacheBytes, t.windowBytes,
      t.hotExperts, t.hotBytes, t.coldExperts, t.coldBytes);
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const TierLayerDesc &layer = t.layers[l];
    std::vector<int> hot;
    for (size_t e = 0; e < layer.hot.size(); ++e)
      if (layer.hot[e])
        hot.push_back(static_cast<int>(e));
    absl::StrAppendFormat(&out,
                          "%s{\"step\": %d, \"name\": %s, \"experts\": %d, "
                          "\"expert_bytes\": %d, \"hot\": [%s]}",
                          l ? ", " : "", layer.stepIndex,
                          jsonString(layer.step), layer.experts,
                          layer.expertBytes, absl::StrJoin(hot, ", "));
  }
  return out + "]}";
}

std::string describePlanText(const Plan &plan) {
  const Plan::Impl &impl = plan.impl();
  std::string out = absl::StrFormat(
      "plan %s: format %d.%d, producer '%s', backend %s, %d device(s)\n",
      impl.source, impl.versionMajor, impl.versionMinor, impl.producer,
      backendName(impl.target.backend), plan.numDevices());
  for (const SymbolDesc &symbol : impl.symbols)
    absl::StrAppendFormat(&out, "symbol %s in [%d, %d]\n", symbol.name,
                          symbol.min, symbol.max);
  if (const GenerationDesc *gen = plan.generation()) {
    absl::StrAppendFormat(
        &out,
        "\ngeneration: max_seq %d, input_ids '%s', position_ids '%s', "
        "logits '%s' (vocab %d), %s, cache %d bytes at max_seq\n",
        gen->maxSeq, gen->inputIds, gen->positionIds, gen->logits,
        gen->vocabSize,
        gen->hasPrefill ? "prefill schedule"
                        : "no prefill schedule (the decode schedule with an "
                          "empty past)",
        gen->cacheBytes);
    for (const CachePairDesc &pair : gen->cache)
      absl::StrAppendFormat(&out,
                            "  cache layer %d axis %d: '%s' -> '%s' (prefill "
                            "'%s')\n",
                            pair.layer, pair.axis, pair.input, pair.output,
                            pair.prefillOutput);
  }
  auto describe = [&](const ScheduleInfo &s, const std::string &what) {
    absl::StrAppendFormat(
        &out, "\n%s: %d steps, %d tensors, arena %d bytes, weights %d bytes\n",
        what, s.steps.size(), s.tensors.size(), s.arenaSize, weightBytes(s));
    if (s.tiers.present) {
      absl::StatusOr<ExpertTiersDesc> tiers = detail::describeTiers(impl, s, 0);
      absl::StrAppend(
          &out, tiers.ok()
                    ? describeTiersText(*tiers, "")
                    : absl::StrCat("tiers: ", tiers.status().message(), "\n"));
    }
    absl::StrAppend(&out, "\ntensors:\n");
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      const TensorInfo &t = s.tensors[i];
      std::string role = t.paged           ? "paged"
                         : t.isWeight      ? "weight"
                         : t.isGraphInput  ? "input"
                         : t.isGraphOutput ? "output"
                                           : "arena";
      absl::StrAppendFormat(&out, "  %4d %-6s %-4s %-24s @%-10d %10d B  %s\n",
                            i, role, dtypeName(t.dtype), shapeText(plan, t),
                            t.offset, t.size, t.name);
    }
    absl::StrAppend(&out, "\nsteps:\n");
    for (const detail::StepInfo &step : s.steps)
      absl::StrAppendFormat(&out, "  %4d %-28s (%s) -> (%s)  %s\n", step.index,
                            fb::EnumNameOpKind(step.op), idList(step.inputs),
                            idList(step.outputs), step.name);
  };
  for (size_t d = 0; d < impl.schedules.size(); ++d)
    describe(impl.schedules[d], absl::StrCat("device ", d));
  for (size_t d = 0; d < impl.prefillSchedules.size(); ++d)
    describe(impl.prefillSchedules[d], absl::StrCat("prefill of device ", d));
  return out;
}

std::string describePlanJson(const Plan &plan) {
  const Plan::Impl &impl = plan.impl();
  std::string out = absl::StrFormat(
      "{\"format\": \"%d.%d\", \"producer\": %s, \"backend\": \"%s\", "
      "\"devices\": %d, \"symbols\": [",
      impl.versionMajor, impl.versionMinor, jsonString(impl.producer),
      backendName(impl.target.backend), plan.numDevices());
  for (size_t i = 0; i < impl.symbols.size(); ++i)
    absl::StrAppendFormat(&out, "%s{\"name\": %s, \"min\": %d, \"max\": %d}",
                          i ? ", " : "", jsonString(impl.symbols[i].name),
                          impl.symbols[i].min, impl.symbols[i].max);
  auto schedules = [&](const std::vector<ScheduleInfo> &all) {
    for (size_t d = 0; d < all.size(); ++d) {
      const ScheduleInfo &s = all[d];
      absl::StrAppendFormat(&out,
                            "%s{\"arena_bytes\": %d, \"weight_bytes\": %d, "
                            "\"tensors\": [",
                            d ? ", " : "", s.arenaSize, weightBytes(s));
      for (size_t i = 0; i < s.tensors.size(); ++i) {
        const TensorInfo &t = s.tensors[i];
        std::vector<std::string> dims;
        for (int k = 0; k < t.rank; ++k)
          dims.push_back(absl::StrFormat("{\"bound\": %d, \"kind\": \"%s\"}",
                                         t.dims[k].bound,
                                         fb::EnumNameDimKind(t.dims[k].kind)));
        absl::StrAppendFormat(
            &out,
            "%s{\"id\": %d, \"name\": %s, \"dtype\": \"%s\", \"dims\": [%s], "
            "\"storage\": \"%s\", \"offset\": %d, \"bytes\": %d, \"input\": "
            "%s, \"output\": %s}",
            i ? ", " : "", i, jsonString(t.name), dtypeName(t.dtype),
            absl::StrJoin(dims, ", "),
            t.paged      ? "paged"
            : t.isWeight ? "weight"
                         : "arena",
            t.offset, t.size, t.isGraphInput ? "true" : "false",
            t.isGraphOutput ? "true" : "false");
      }
      absl::StrAppend(&out, "], \"steps\": [");
      for (const detail::StepInfo &step : s.steps)
        absl::StrAppendFormat(
            &out,
            "%s{\"op\": \"%s\", \"name\": %s, \"inputs\": [%s], "
            "\"outputs\": [%s]}",
            step.index ? ", " : "", fb::EnumNameOpKind(step.op),
            jsonString(step.name), idList(step.inputs), idList(step.outputs));
      absl::StrAppend(&out, "]");
      if (s.tiers.present)
        if (absl::StatusOr<ExpertTiersDesc> tiers =
                detail::describeTiers(impl, s, 0);
            tiers.ok())
          absl::StrAppend(&out, ", \"tiers\": ", describeTiersJson(*tiers));
      absl::StrAppend(&out, "}");
    }
  };
  absl::StrAppend(&out, "], \"schedules\": [");
  schedules(impl.schedules);
  absl::StrAppend(&out, "]");
  if (const GenerationDesc *gen = plan.generation()) {
    absl::StrAppendFormat(
        &out,
        ", \"generation\": {\"max_seq\": %d, \"input_ids\": %s, "
        "\"position_ids\": %s, \"logits\": %s, \"vocab\": %d, "
        "\"cache_bytes\": %d, \"cache\": [",
        gen->maxSeq, jsonString(gen->inputIds), jsonString(gen->positionIds),
        jsonString(gen->logits), gen->vocabSize, gen->cacheBytes);
    for (size_t i = 0; i < gen->cache.size(); ++i) {
      const CachePairDesc &pair = gen->cache[i];
      absl::StrAppendFormat(
          &out,
          "%s{\"input\": %s, \"output\": %s, \"prefill_output\": %s, "
          "\"layer\": %d, \"axis\": %d}",
          i ? ", " : "", jsonString(pair.input), jsonString(pair.output),
          jsonString(pair.prefillOutput), pair.layer, pair.axis);
    }
    absl::StrAppend(&out, "], \"prefill_schedules\": [");
    schedules(impl.prefillSchedules);
    absl::StrAppend(&out, "]}");
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

} // namespace moert
