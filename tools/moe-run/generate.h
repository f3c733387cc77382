//===- generate.h - moe-run's token generation mode -------------*- C++ -*-===//
//
// `moe-run GEN.plan --prompt-ids 3,14,15 --max-new-tokens N ...` runs a
// generation plan through moert::Generator (docs/cli.md, "Generating
// tokens").
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_GENERATE_H
#define MOE_RUN_GENERATE_H

#include "moert/generator.h"

#include <optional>
#include <string>
#include <vector>

namespace moe_run {

class Recording;

struct GenerateArgs {
  /// --prompt-ids or --prompts was given.
  bool active = false;
  std::vector<int64_t> promptIds;
  /// --prompts FILE: one prompt per line, decoded one after another.
  std::string promptsFile;
  moert::GenerateOptions options;
  bool stream = false;
  /// --kv-cache in-place (default) or copy (SessionOptions::kvCacheInPlace).
  bool kvCacheInPlace = true;
  /// Generation flags seen (for "needs --prompt-ids").
  std::vector<std::string> flags;
};

/// Parses generation option `name` with `value` into `args`: nullopt when
/// `name` is no generation option, "" when parsed, else the usage error.
std::optional<std::string> parseGenerateOption(const std::string &name,
                                               const std::string &value,
                                               GenerateArgs &args);

/// Checks the generation options once all are parsed; "" when fine.
std::string checkGenerateArgs(const GenerateArgs &args);

/// Reads a --prompts file: one prompt per non-empty line, its ids separated
/// by commas or white space; errors name the file and the line. At most
/// 1 MiB and 4096 prompts.
absl::StatusOr<std::vector<std::vector<int64_t>>>
readPromptsFile(const std::string &path);

/// How runGeneration runs the plan.
struct GenerationRun {
  int threads = 0;
  uint64_t seed = 0;
  std::string outputDir, planPath, statsPath;
  /// An expert-parallel plan: every device in this process, or this MPI
  /// rank's (moert::GroupGenerator), with this exchange timeout.
  bool group = false;
  bool mpi = false;
  double commTimeout = 60;
  /// A tiered plan's budget, read mode and reads ahead (SessionOptions).
  uint64_t deviceMemory = 0;
  std::string expertRead = "pread";
  std::string expertPrefetch;
};

/// Generates with `plan` for each prompt in turn: the ids to stdout, one
/// line per prompt (as they come with --stream), a summary line to stderr,
/// DIR/tokens.npy and DIR/logits.npy with an output directory, the
/// statistics JSON with `statsPath` (under MPI, rank 0 writes them all).
absl::Status runGeneration(const moert::Plan &plan, const GenerateArgs &args,
                           const GenerationRun &run, Recording &recording);

} // namespace moe_run

#endif // MOE_RUN_GENERATE_H
