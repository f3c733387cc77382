//===- bench_stats.cpp - moe-run's timing of runs -------------------------===//

#include "bench_stats.h"
#include "stats_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>

namespace moe_run {

double quantile(const std::vector<double> &sorted, double q) {
  if (sorted.empty())
    return 0;
  double rank = q * double(sorted.size() - 1);
  size_t below = static_cast<size_t>(std::floor(rank));
  size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (sorted[above] - sorted[below]) * (rank - below);
}

Summary summarize(std::vector<double> values) {
  Summary s;
  s.count = values.size();
  if (values.empty())
    return s;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values)
    sum += v;
  s.mean = sum / values.size();
  double squares = 0;
  for (double v : values)
    squares += (v - s.mean) * (v - s.mean);
  s.stddev = values.size() > 1 ? std::sqrt(squares / (values.size() - 1)) : 0;
  s.p50 = quantile(values, 0.5);
  s.p90 = quantile(values, 0.9);
  s.p99 = quantile(values, 0.99);
  s.min = values.front();
  s.max = values.back();
  return s;
}

void RunTimes::add(double ms, const std::vector<moert::StepStats> &steps) {
  runMs_.push_back(ms);
  if (lastTotals_.size() != steps.size()) {
    lastTotals_.assign(steps.size(), 0.0);
    stepMs_.assign(steps.size(), {});
  }
  bool keep = runMs_.size() <= kMaxStepSamples;
  for (size_t i = 0; i < steps.size(); ++i) {
    // Totals since the reset before the timed runs: this run's time is the
    // growth since the previous one.
    if (keep)
      stepMs_[i].push_back((steps[i].totalSeconds - lastTotals_[i]) * 1e3);
    lastTotals_[i] = steps[i].totalSeconds;
  }
}

std::vector<Summary> RunTimes::steps() const {
  std::vector<Summary> out;
  for (const std::vector<double> &times : stepMs_)
    out.push_back(summarize(times));
  return out;
}

int64_t tokensPerRun(const std::map<std::string, int64_t> &sizes) {
  if (sizes.empty())
    return 0;
  int64_t tokens = 1;
  for (const auto &[symbol, size] : sizes)
    tokens *= size;
  return tokens;
}

namespace {

/// "T=16" or "batch=1 x seq=16".
std::string describeSizes(const std::map<std::string, int64_t> &sizes) {
  return absl::StrJoin(sizes, " x ", absl::PairFormatter("="));
}

} // namespace

std::string plural(int64_t count, const char *one, const char *many) {
  return absl::StrCat(count, " ", count == 1 ? one : many);
}

std::string timingText(const RunTimes &times, int threads,
                       const std::map<std::string, int64_t> &sizes) {
  Summary s = times.runs();
  std::string warm =
      times.cold()
          ? "cold (no warm-up: the first run's one-time costs included)"
          : absl::StrCat("after ",
                         plural(times.warmup(), "warm-up", "warm-ups"));
  std::string text;
  if (s.count == 1)
    absl::StrAppend(&text, "moe-run: latency of 1 run, ", warm, ", ",
                    plural(threads, "thread", "threads"),
                    absl::StrFormat(": %.3f ms\n", s.mean));
  else
    absl::StrAppend(
        &text, "moe-run: latency over ", s.count, " runs, ", warm, ", ",
        plural(threads, "thread", "threads"),
        absl::StrFormat(": mean %.3f ms, stddev %.3f ms, p50 %.3f ms, p90 "
                        "%.3f ms, p99 %.3f ms, min %.3f ms, max %.3f ms\n",
                        s.mean, s.stddev, s.p50, s.p90, s.p99, s.min, s.max));
  double runsPerSecond = s.mean > 0 ? 1e3 / s.mean : 0;
  absl::StrAppend(
      &text, absl::StrFormat("moe-run: throughput %.1f runs/s", runsPerSecond));
  if (int64_t tokens = tokensPerRun(sizes))
    absl::StrAppend(&text,
                    absl::StrFormat(", %.1f tokens/s", runsPerSecond * tokens),
                    " (", plural(tokens, "token", "tokens"),
                    " per run: ", describeSizes(sizes), ")");
  else
    absl::StrAppend(&text, " (no symbolic dims: no token rate)");
  absl::StrAppend(&text, "\n");
  return text;
}

void appendTimingJson(std::string &json, const RunTimes &times,
                      const std::map<std::string, int64_t> &sizes) {
  Summary s = times.runs();
  auto ms = [](double v) { return absl::StrFormat("%.6f", v); };
  double runsPerSecond = s.mean > 0 ? 1e3 / s.mean : 0;
  int64_t tokens = tokensPerRun(sizes);
  absl::StrAppend(
      &json, ",\n  \"cold\": ", times.cold() ? "true" : "false",
      ", \"warmup_runs\": ", times.warmup(), ",\n  \"mean_ms\": ", ms(s.mean),
      ", \"stddev_ms\": ", ms(s.stddev), ", \"p50_ms\": ", ms(s.p50),
      ", \"p90_ms\": ", ms(s.p90), ", \"p99_ms\": ", ms(s.p99),
      ", \"min_ms\": ", ms(s.min), ", \"max_ms\": ", ms(s.max),
      ",\n  \"runs_per_s\": ", absl::StrFormat("%.3f", runsPerSecond),
      ", \"tokens_per_run\": ", tokens, ", \"tokens_per_s\": ",
      tokens ? absl::StrFormat("%.3f", runsPerSecond * tokens) : "null",
      ", \"token_dims\": {",
      absl::StrJoin(sizes, ", ",
                    [](std::string *out, const auto &entry) {
                      absl::StrAppend(out, jsonString(entry.first), ": ",
                                      entry.second);
                    }),
      "},\n  \"step_sample_runs\": ", times.stepSamples(), ",\n  \"run_ms\": [",
      absl::StrJoin(
          times.runMs(), ", ",
          [&](std::string *out, double v) { absl::StrAppend(out, ms(v)); }),
      "]");
}

} // namespace moe_run
