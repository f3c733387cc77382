//===- options.h - moe-run's command line -----------------------*- C++ -*-===//
//
// moe-run's options (docs/cli.md, "moe-run"): parsed from argv, checked
// against the mode they run in (a forward run, a generation, a generation
// benchmark, --compare), so that a flag that does not apply is a usage error
// naming it rather than silently ignored, and a misspelt flag is answered
// with the nearest one.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_OPTIONS_H
#define MOE_RUN_OPTIONS_H

#include "generate.h"
#include "generated_inputs.h"
#include "moert/nccl.h"

#include <string>

namespace moe_run {

/// The text of `moe-run --help`.
extern const char *const kUsage;

struct Options {
  std::string plan;
  InputOptions inputs;
  std::string outputDir;
  std::string saveInputs;
  int threads = 0;
  int bench = 0;
  double duration = 0;
  /// -1: the default (1 with --bench or --duration, else 0).
  int warmup = -1;
  std::string stats;
  std::string trace;
  std::string reportHtml;
  std::string compare;
  std::string backend = "cpu";
  bool cudaGraphs = true;
  bool placement = false;
  int devices = 0;
  double commTimeout = 60;
  moert::CommKind comm = moert::CommKind::Host;
  GenerateArgs generate;

  uint64_t deviceMemory = 0;
  std::string expertRead = "pread";
  /// Empty: the plan's.
  std::string prefetch;
  bool freshInputs = false;

  /// Whether runs are timed (--bench or --duration).
  bool timed() const { return bench > 0 || duration > 0; }
  /// The warm-up runs (or generation repetitions) before the timed ones.
  int warmupRuns() const { return warmup >= 0 ? warmup : timed() ? 1 : 0; }
};

/// Parses argv into `options`; returns a usage error, "" on success, "help"
/// for --help and "version" for --version.
std::string parseArgs(int argc, char **argv, Options &options);

/// The option of moe-run nearest to the unknown `name` ("--bnech":
/// "--bench"), by edit distance as LLVM's command line suggests; "" when
/// none is near enough to be what was meant.
std::string nearestOption(const std::string &name);

} // namespace moe_run

#endif // MOE_RUN_OPTIONS_H
