//===- stats_json.h - moe-run's JSON for MoE layer statistics ---*- C++ -*-===//
//
// Writes the "moe_layers" arrays of `moe-run --stats` (docs/cli.md): the
// model's layers at the top level (merged over the devices of an
// expert-parallel run) and each device's own under "devices".
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_STATS_JSON_H
#define MOE_RUN_STATS_JSON_H

#include "bench_stats.h"
#include "moert/stats.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <string>
#include <string_view>
#include <vector>

namespace moe_run {

/// `text` as a JSON string literal.
inline std::string jsonString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      absl::StrAppend(&out, "\\", std::string(1, c));
    else if (static_cast<unsigned char>(c) < 0x20)
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
    else
      out.push_back(c);
  }
  return out + "\"";
}

/// A ratio for JSON: null when 0 (nothing to compare).
inline std::string jsonRatio(double ratio) {
  return ratio ? absl::StrFormat("%.4f", ratio) : "null";
}

/// The routing of a MoE step (Router, Experts): tokens each expert received
/// over the runs, their imbalance (the largest load over the mean; null when
/// nothing was routed) and the assignments dropped for capacity.
inline void appendExpertLoad(std::string &json, const moert::StepStats &s) {
  absl::StrAppend(
      &json, ", \"expert_load\": [", absl::StrJoin(s.expertLoad, ", "),
      "], \"imbalance\": ", jsonRatio(moert::loadImbalance(s.expertLoad)),
      ", \"dropped\": ", s.droppedAssignments);
}

/// Appends `,\n  "key": [steps...]`: per step its name, op, calls and
/// times, with the routing of MoE steps. With `perRun` (one per step), each
/// step also gets the median and p90 of its time per run.
inline void appendSteps(std::string &json, std::string_view key,
                        const std::vector<moert::StepStats> &stats,
                        const std::vector<Summary> *perRun = nullptr) {
  absl::StrAppend(&json, ",\n  ", jsonString(key), ": [");
  for (size_t i = 0; i < stats.size(); ++i) {
    const moert::StepStats &s = stats[i];
    double total = s.totalSeconds * 1e3;
    absl::StrAppend(&json, i ? "," : "", "\n    {\"index\": ", i,
                    ", \"name\": ", jsonString(s.name),
                    ", \"op\": ", jsonString(s.op), ", \"calls\": ", s.calls,
                    ", \"total_ms\": ", absl::StrFormat("%.6f", total),
                    ", \"mean_ms\": ",
                    absl::StrFormat("%.6f", s.calls ? total / s.calls : 0.0));
    if (perRun && i < perRun->size())
      absl::StrAppend(
          &json, ", \"median_ms\": ", absl::StrFormat("%.6f", (*perRun)[i].p50),
          ", \"p90_ms\": ", absl::StrFormat("%.6f", (*perRun)[i].p90));
    if (!s.expertLoad.empty())
      appendExpertLoad(json, s);
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, "\n  ]");
}

/// Appends a tiered layer's `"expert_cache"`: hits, misses, the hit rate,
/// bytes paged in (per run and per second of the run's layer time), the
/// achieved read bandwidth (bytes over the reads' wall time) and the time
/// the compute waited for its weights, per run.
inline void appendExpertCache(std::string &json, const moert::MoeLayerStats &l,
                              const std::string &pad) {
  double perRun = l.runs ? 1.0 / l.runs : 0.0;
  const moert::ExpertCacheCounters &c = l.cache;
  uint64_t lookups = c.hits + c.misses;
  const moert::PrefetchStats &ahead = c.prefetch;
  absl::StrAppend(
      &json, ",\n", pad, "   \"expert_cache\": {\"hits\": ", c.hits,
      ", \"misses\": ", c.misses, ", \"hit_rate\": ",
      lookups ? absl::StrFormat("%.4f", double(c.hits) / lookups)
              : std::string("null"),
      ", \"bytes_paged_in\": ", c.bytesPagedIn,
      ", \"bytes_paged_in_per_run\": ",
      absl::StrFormat("%.1f", c.bytesPagedIn * perRun),
      ", \"paging_rate_bytes_per_s\": ",
      absl::StrFormat(
          "%.1f", l.layerSeconds > 0 ? c.bytesPagedIn / l.layerSeconds : 0.0),
      ", \"read_bandwidth_bytes_per_s\": ",
      absl::StrFormat("%.1f",
                      c.readSeconds > 0 ? c.bytesPagedIn / c.readSeconds : 0.0),
      ", \"read_ms\": ", absl::StrFormat("%.6f", c.readSeconds * 1e3 * perRun),
      ", \"wait_ms\": ", absl::StrFormat("%.6f", c.waitSeconds * 1e3 * perRun),
      ", \"prefetch\": {\"issued\": ", ahead.issued, ", \"used\": ", ahead.used,
      ", \"late\": ", ahead.late, ", \"hit_rate\": ",
      ahead.issued ? absl::StrFormat("%.4f", double(ahead.used) / ahead.issued)
                   : std::string("null"),
      ", \"bytes\": ", ahead.bytes, ", \"read_ms\": ",
      absl::StrFormat("%.6f", ahead.readSeconds * 1e3 * perRun),
      ", \"wait_ms\": ",
      absl::StrFormat("%.6f", ahead.waitSeconds * 1e3 * perRun), "}}");
}

/// Appends `"key": [layers...]` at `indent` spaces: per MoE layer
/// (moert/stats.h) the tokens each expert computed and the assignments
/// dropped for capacity, summed over the runs; the imbalance (largest load
/// over the mean); and the mean time per run of the expert group, of the
/// layer's exchanges and of the whole layer. A device's layers also name
/// their steps; expert-parallel layers add their slots, merged layers the
/// rows per device.
inline void appendMoeLayers(std::string &json, std::string_view key,
                            const std::vector<moert::MoeLayerStats> &layers,
                            int indent) {
  std::string pad(indent, ' ');
  auto step = [](int index) {
    return index < 0 ? std::string("null") : absl::StrCat(index);
  };
  absl::StrAppend(&json, ",\n", pad, jsonString(key), ": [");
  for (size_t i = 0; i < layers.size(); ++i) {
    const moert::MoeLayerStats &l = layers[i];
    bool merged = !l.deviceRows.empty();
    bool parallel = merged || l.assignSlots >= 0;
    double perRun = l.runs ? 1e3 / l.runs : 0.0;
    absl::StrAppend(&json, i ? "," : "", "\n", pad,
                    "  {\"name\": ", jsonString(l.name));
    if (!merged) {
      absl::StrAppend(&json, ", \"router_step\": ", step(l.router));
      if (parallel)
        absl::StrAppend(&json,
                        ", \"assign_slots_step\": ", step(l.assignSlots));
      absl::StrAppend(&json, ", \"dispatch_step\": ", step(l.dispatch),
                      ", \"experts_step\": ", step(l.experts),
                      ", \"shared_expert_step\": ", step(l.sharedExpert),
                      ", \"combine_step\": ", step(l.combine));
    }
    absl::StrAppend(
        &json, ", \"runs\": ", l.runs, ",\n", pad,
        "   \"tokens_per_expert\": [", absl::StrJoin(l.tokensPerExpert, ", "),
        "],\n", pad, "   \"kept\": ", l.keptAssignments(),
        ", \"dropped\": ", l.droppedAssignments,
        ", \"imbalance\": ", jsonRatio(l.imbalance()), ", \"experts_ms\": ",
        absl::StrFormat("%.6f", l.expertsSeconds * perRun),
        ", \"layer_ms\": ", absl::StrFormat("%.6f", l.layerSeconds * perRun));
    if (parallel)
      absl::StrAppend(
          &json,
          ", \"comm_ms\": ", absl::StrFormat("%.6f", l.commSeconds * perRun),
          ",\n", pad, "   \"routed_per_expert\": ",
          // A gate of generic ops (no Router step) counts no assignments.
          l.routedPerExpert.empty()
              ? std::string("null")
              : absl::StrCat("[", absl::StrJoin(l.routedPerExpert, ", "), "]"),
          ", \"slot_experts\": [", absl::StrJoin(l.slotExperts, ", "),
          "], \"tokens_per_slot\": [", absl::StrJoin(l.tokensPerSlot, ", "),
          "]");
    if (l.tiered)
      appendExpertCache(json, l, pad);
    if (merged)
      absl::StrAppend(
          &json, ",\n", pad, "   \"device_rows\": [",
          absl::StrJoin(l.deviceRows, ", "),
          "], \"device_imbalance\": ", jsonRatio(l.deviceImbalance()));
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, layers.empty() ? "]" : absl::StrCat("\n", pad, "]"));
}

} // namespace moe_run

#endif // MOE_RUN_STATS_JSON_H
