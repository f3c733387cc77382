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
  /// --prompt-ids was given.
  bool active = false;
  std::vector<int64_t> promptIds;
  moert::GenerateOptions options;
  bool stream = false;
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

/// Generates with `plan`: the ids to stdout (as they come with --stream),
/// a summary line to stderr, DIR/tokens.npy and DIR/logits.npy with an
/// output directory, the statistics JSON with `statsPath`, and the trace
/// and report of `recording` (a track per session: prefill and decode).
absl::Status runGeneration(const moert::Plan &plan, const GenerateArgs &args,
                           int threads, uint64_t seed,
                           const std::string &outputDir,
                           const std::string &planPath,
                           const std::string &statsPath, Recording &recording);

} // namespace moe_run

#endif // MOE_RUN_GENERATE_H
