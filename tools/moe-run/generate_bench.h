//===- generate_bench.h - moe-run's generation benchmark --------*- C++ -*-===//
//
// `moe-run GEN.plan --bench N --prompt-tokens P --max-new-tokens G
// [--warmup W]` (docs/cli.md, "Generation benchmark"): W untimed
// repetitions of the whole generation (one-time costs: oneDNN's kernel
// generation, first touches of the caches), then N timed ones, and a table
// in llama-bench's form: `pp P` (the prefill's prompt tokens per second) and
// `tg G` (the decode steps' tokens per second) as mean ± stddev over the
// repetitions, then the time to first token and the inter-token latency,
// p50 and p99. --stats writes the same with every repetition's values.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_GENERATE_BENCH_H
#define MOE_RUN_GENERATE_BENCH_H

#include "generate.h"

#include <string>
#include <vector>

namespace moe_run {

/// The timed repetitions of one generation benchmark.
struct GenerationBench {
  std::string plan;
  int threads = 0;
  int warmup = 0;
  /// The prompt's length and the new tokens of every repetition; the
  /// decode steps are newTokens - 1 (the prefill draws the first token).
  int64_t promptTokens = 0;
  int64_t newTokens = 0;
  /// One entry per timed repetition.
  std::vector<double> prefillTokensPerS, decodeTokensPerS, firstTokenMs;
  /// The time between consecutive new tokens, over every repetition.
  std::vector<double> interTokenMs;
  /// Multimodal plans: the vision stages' time of each repetition.
  std::vector<double> visionMs;
};

/// The table moe-run prints on stdout after the repetitions: a header line,
/// the `pp P` and `tg G` rows (tokens/s, mean ± sample stddev) and the
/// latency rows (time to first token, inter-token; p50 and p99).
std::string benchTable(const GenerationBench &bench);

/// Appends the benchmark's --stats fields (after "plan"):
/// `,\n  "threads": ...` through "inter_token_ms".
void appendBenchJson(std::string &json, const GenerationBench &bench);

/// Runs the benchmark of `args`'s prompt on `generator` (one device) or
/// `group` (expert-parallel), prints the table (rank 0 under MPI) and writes
/// run.statsPath; `recording` holds the timed repetitions.
absl::Status benchGeneration(moert::Generator &generator,
                             const moert::Plan &plan, const GenerateArgs &args,
                             const GenerationRun &run, Recording &recording);
absl::Status benchGeneration(moert::GroupGenerator &group,
                             const moert::Plan &plan, const GenerateArgs &args,
                             const GenerationRun &run, Recording &recording);

} // namespace moe_run

#endif // MOE_RUN_GENERATE_BENCH_H
