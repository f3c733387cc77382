//===- expert_cache_report.h - moe-run's report of tiered experts -*- C++ -*-=//
//
// What `moe-run --stats` says of a tiered plan's expert cache
// (docs/tiered-experts.md): the budget, the hot set, the read mode and the
// plan file's measured read bandwidth, then per tiered layer its hits,
// misses, bytes paged in and waits, and its reads ahead. A forward run has
// one session; a generation run reports its prefill and decode sessions,
// which share one cache.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_EXPERT_CACHE_REPORT_H
#define MOE_RUN_EXPERT_CACHE_REPORT_H

#include "moert/moert.h"

#include <cstdio>
#include <string>
#include <vector>

namespace moe_run {

/// A field of /proc/self/status in bytes ("VmHWM": the peak resident set,
/// "VmPeak": the peak virtual size); 0 when unknown.
uint64_t processStatusBytes(const char *field);

/// Appends `,\n  "memory": {...}`: the peak resident and virtual bytes of
/// this process (from /proc/self/status; 0 when unknown) and how `plan` is
/// held ("weight_pages": "huge" or "mapped", moe-run --weight-pages).
void appendProcessMemory(std::string &json, const moert::Plan &plan);

/// One session's steps to report, its lines prefixed with `phase` ("" or
/// "decode "); `prefill` when they are the prefill schedule's.
struct CachePhase {
  std::string phase;
  std::vector<moert::StepStats> steps;
  bool prefill = false;
};

/// For a tiered `session`: appends `,\n  "expert_cache": {...}` to `json`
/// (measuring the plan file's read bandwidth over up to 256 MiB of its
/// paged experts) and prints the cache and each phase's tiered layers to
/// `out`. Nothing for a plan that is not tiered.
absl::Status reportExpertCache(std::string &json, const moert::Plan &plan,
                               moert::SessionBase &session,
                               const std::vector<CachePhase> &phases,
                               std::FILE *out);

} // namespace moe_run

#endif // MOE_RUN_EXPERT_CACHE_REPORT_H
