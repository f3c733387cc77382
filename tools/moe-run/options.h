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
#include <vector>

namespace moe_run {

/// The text of `moe-run --help`.
extern const char *const kUsage;

/// How runs repeat and are timed: --bench, --duration, --warmup,
/// --fresh-inputs.
struct TimingOptions {
  int bench = 0;
  double duration = 0;
  /// -1: the default (1 with --bench or --duration, else 0).
  int warmup = -1;
  bool freshInputs = false;

  /// Whether runs are timed (--bench or --duration).
  bool timed() const { return bench > 0 || duration > 0; }
  /// The warm-up runs (or generation repetitions) before the timed ones.
  int warmupRuns() const { return warmup >= 0 ? warmup : timed() ? 1 : 0; }
  /// The usage error of a forward run's timing flags, or "".
  std::string verify() const;
};

/// What a run writes: --output-dir, --save-inputs, --stats, --trace,
/// --report-html (their paths are checked before the plan loads,
/// preflight.h).
struct OutputOptions {
  std::string outputDir;
  std::string saveInputs;
  std::string stats;
  std::string trace;
  std::string reportHtml;
};

/// Where and on how many devices the plan runs: --backend, --cuda-graphs,
/// --placement, --devices, --comm, --comm-timeout, --threads.
struct DeviceOptions {
  std::string backend = "cpu";
  bool cudaGraphs = true;
  bool placement = false;
  int devices = 0;
  int threads = 0;
  double commTimeout = 60;
  moert::CommKind comm = moert::CommKind::Host;
  /// --weight-pages: how the plan's bytes are held.
  moert::LoadOptions::WeightPages weightPages =
      moert::LoadOptions::WeightPages::Auto;

  /// The usage error of a flag that needs another backend, or "".
  std::string verify() const;
};

/// A tiered plan's expert weights: --device-memory, --expert-read,
/// --prefetch, --expert-cache.
struct TierOptions {
  uint64_t deviceMemory = 0;
  std::string expertRead = "auto";
  /// Empty: the plan's.
  std::string prefetch;
  std::string cache = "static";

  /// The usage error of a flag that does not apply on `device`'s backend,
  /// or "".
  std::string verify(const DeviceOptions &device) const;
};

/// Text in and out: --tokenizer, --prompt, --chat, --system, --stop.
/// moe-run hands such a generation to `moe-serve generate` (Python:
/// tokenizers and jinja2 over the moert module, docs/serving.md).
struct TextOptions {
  /// A tokenizer.json, or a folder with it and tokenizer_config.json.
  std::string tokenizer;
  std::string prompt;
  bool promptGiven = false;
  /// The prompt is a user message, through the chat template.
  bool chat = false;
  /// With --chat: a system message before it.
  std::string system;
  std::vector<std::string> stops;

  /// Whether any of these flags was given.
  bool active() const {
    return !tokenizer.empty() || promptGiven || chat || !system.empty() ||
           !stops.empty();
  }
};

/// Everything moe-run was asked, one struct per concern.
struct Options {
  std::string plan;
  InputOptions inputs;
  TimingOptions timing;
  OutputOptions outputs;
  DeviceOptions device;
  TierOptions tiers;
  /// --compare MODEL.onnx.
  std::string compare;
  GenerateArgs generate;
  TextOptions text;

  /// Checks that each flag applies to the mode it runs in (a forward run, a
  /// generation, a generation benchmark or --compare), then each concern's
  /// own verify(); "" when they all do, else the usage error naming the
  /// first flag that does not.
  std::string verify() const;
};

/// Parses argv into `options`; returns a usage error, "" on success, "help"
/// for --help and "version" for --version.
std::string parseArgs(int argc, char **argv, Options &options);

/// The arguments of `moe-serve generate` for a text generation
/// (options.text.active()).
std::vector<std::string> textGenerateArgs(const Options &options);

/// The option of moe-run nearest to the unknown `name` ("--bnech":
/// "--bench"), by edit distance as LLVM's command line suggests; "" when
/// none is near enough to be what was meant.
std::string nearestOption(const std::string &name);

} // namespace moe_run

#endif // MOE_RUN_OPTIONS_H
