//===- expert_cache_report.cpp - moe-run's report of tiered experts -------===//

#include "expert_cache_report.h"

#include "moert/stats.h"
#include "stats_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <cstdlib>
#include <cstring>

namespace moe_run {

uint64_t processStatusBytes(const char *field) {
  std::FILE *file = std::fopen("/proc/self/status", "r");
  if (!file)
    return 0;
  char line[256];
  uint64_t kib = 0;
  size_t length = std::strlen(field);
  while (std::fgets(line, sizeof line, file))
    if (std::strncmp(line, field, length) == 0 && line[length] == ':')
      kib = std::strtoull(line + length + 1, nullptr, 10);
  std::fclose(file);
  return kib * 1024;
}

void appendProcessMemory(std::string &json, const moert::Plan &plan) {
  absl::StrAppend(
      &json,
      ",\n  \"memory\": {\"peak_rss_bytes\": ", processStatusBytes("VmHWM"),
      ", \"peak_virtual_bytes\": ", processStatusBytes("VmPeak"),
      ", \"weight_pages\": \"", plan.onHugePages() ? "huge" : "mapped", "\"}");
}

absl::Status reportExpertCache(std::string &json, const moert::Plan &plan,
                               moert::SessionBase &session,
                               const std::vector<CachePhase> &phases,
                               std::FILE *out) {
  moert::ExpertCacheStats cache = session.expertCacheStats();
  if (!cache.tiered)
    return absl::OkStatus();
  MOERT_ASSIGN_OR_RETURN(double bandwidth,
                         session.measureExpertReadBandwidth(256 << 20));
  absl::StrAppend(&json, ",\n  \"expert_cache\": {\"budget\": ", cache.budget,
                  ", \"resident_bytes\": ", cache.residentBytes,
                  ", \"capacity_bytes\": ", cache.capacityBytes,
                  ", \"used_bytes\": ", cache.usedBytes,
                  ", \"hot_experts\": ", cache.hotExperts,
                  ", \"hot_bytes\": ", cache.hotBytes,
                  ", \"read_mode\": ", jsonString(cache.readMode),
                  ", \"prefetch\": ", jsonString(cache.prefetch),
                  ", \"policy\": ", jsonString(cache.policy),
                  ", \"measured_read_bandwidth_bytes_per_s\": ",
                  absl::StrFormat("%.1f", bandwidth), "}");
  // The CUDA backend copies its cold experts from pinned host memory.
  bool pinned = cache.readMode == "pinned";
  std::fprintf(out,
               "moe-run: expert cache: budget %llu bytes, %u hot experts "
               "(%llu bytes), capacity %llu, %s reads, prefetch %s, %s "
               "cache; %s at %.2f GB/s\n",
               static_cast<unsigned long long>(cache.budget), cache.hotExperts,
               static_cast<unsigned long long>(cache.hotBytes),
               static_cast<unsigned long long>(cache.capacityBytes),
               cache.readMode.c_str(), cache.prefetch.c_str(),
               cache.policy.empty() ? "static" : cache.policy.c_str(),
               pinned ? "pinned host memory copies to the device"
                      : "the plan file reads",
               bandwidth / 1e9);
  for (const CachePhase &phase : phases) {
    std::vector<moert::MoeLayerStats> layers =
        moert::moeLayerStats(plan, phase.steps, 0, phase.prefill);
    for (const moert::MoeLayerStats &l : layers)
      if (l.tiered)
        std::fprintf(out,
                     "moe-run: %s%s: %llu hits, %llu misses, %.2f MB paged "
                     "in, read at %.2f GB/s, waited %.3f ms per run\n",
                     phase.phase.c_str(), l.name.c_str(),
                     static_cast<unsigned long long>(l.cache.hits),
                     static_cast<unsigned long long>(l.cache.misses),
                     l.cache.bytesPagedIn / 1e6,
                     l.cache.readSeconds > 0
                         ? l.cache.bytesPagedIn / l.cache.readSeconds / 1e9
                         : 0.0,
                     l.runs ? l.cache.waitSeconds * 1e3 / l.runs : 0.0);
    for (const moert::MoeLayerStats &l : layers)
      if (l.tiered && l.cache.prefetch.issued)
        std::fprintf(
            out,
            "moe-run: %s%s: %llu experts read ahead, %llu of them used "
            "(%llu late), waited %.3f ms per run for reads ahead\n",
            phase.phase.c_str(), l.name.c_str(),
            static_cast<unsigned long long>(l.cache.prefetch.issued),
            static_cast<unsigned long long>(l.cache.prefetch.used),
            static_cast<unsigned long long>(l.cache.prefetch.late),
            l.runs ? l.cache.prefetch.waitSeconds * 1e3 / l.runs : 0.0);
  }
  return absl::OkStatus();
}

} // namespace moe_run
