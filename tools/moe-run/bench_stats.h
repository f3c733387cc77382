//===- bench_stats.h - moe-run's timing of runs -----------------*- C++ -*-===//
//
// What `moe-run --bench N` / `--duration SECONDS` measure and print
// (docs/cli.md, "Timing"): the wall time of every timed run, its mean,
// standard deviation, percentiles, min and max, the throughput in runs and
// tokens per second, and each step's time per run (median and p90, which
// outliers do not inflate as they do the mean).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_BENCH_STATS_H
#define MOE_RUN_BENCH_STATS_H

#include "moert/moert.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moe_run {

/// "1 run", "2 runs": `count` and the noun that agrees with it.
std::string plural(int64_t count, const char *one, const char *many);

/// Order statistics of a sample.
struct Summary {
  size_t count = 0;
  double mean = 0, stddev = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};

/// The q-th quantile (q in [0, 1]) of sorted `values`, interpolated linearly
/// between the two nearest ranks (numpy's default); 0 when empty.
double quantile(const std::vector<double> &sorted, double q);

/// The summary of `values` (the sample standard deviation, n - 1).
Summary summarize(std::vector<double> values);

/// Per-step times are kept for at most this many runs (the first ones), so
/// that a long --duration of a fast plan stays small.
constexpr size_t kMaxStepSamples = 10000;

/// The timed runs of one moe-run invocation.
class RunTimes {
public:
  /// `warmup` runs preceded the timed ones (0: the first was cold).
  explicit RunTimes(int warmup) : warmup_(warmup) {}

  /// Records one run of `ms` milliseconds, with the session's step
  /// statistics after it (their totals since the last reset).
  void add(double ms, const std::vector<moert::StepStats> &steps);

  int warmup() const { return warmup_; }
  bool cold() const { return warmup_ == 0; }
  const std::vector<double> &runMs() const { return runMs_; }
  Summary runs() const { return summarize(runMs_); }
  /// Each step's time per run over the first kMaxStepSamples runs.
  std::vector<Summary> steps() const;
  /// Runs whose step times were kept.
  size_t stepSamples() const { return stepMs_.empty() ? 0 : stepMs_[0].size(); }

private:
  int warmup_;
  std::vector<double> runMs_;
  std::vector<std::vector<double>> stepMs_;
  std::vector<double> lastTotals_;
};

/// The tokens one run computes: the product of the sizes of the plan's
/// symbolic dims that ran (`sizes`, symbol -> size); 0 when none is
/// symbolic.
int64_t tokensPerRun(const std::map<std::string, int64_t> &sizes);

/// The lines moe-run prints after the timed runs: latency, then
/// throughput.
std::string timingText(const RunTimes &times, int threads,
                       const std::map<std::string, int64_t> &sizes);

/// Appends the timing fields of the --stats JSON (after "runs"):
/// `,\n  "cold": ..., "mean_ms": ...` through the per-run times.
void appendTimingJson(std::string &json, const RunTimes &times,
                      const std::map<std::string, int64_t> &sizes);

} // namespace moe_run

#endif // MOE_RUN_BENCH_STATS_H
