//===- generate.h - moe-run's token generation mode -------------*- C++ -*-===//
//
// `moe-run GEN.plan --prompt-ids 3,14,15 --max-new-tokens N ...` runs a
// generation plan through moert::Generator (docs/cli.md, "Generating
// tokens"); with --bench N it times N repetitions (generate_bench.h).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_GENERATE_H
#define MOE_RUN_GENERATE_H

#include "moert/generator.h"
#include "moert/npy.h"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace moert {
class GroupGenerator;
} // namespace moert

namespace moe_run {

class Recording;

struct GenerateArgs {
  /// --prompt-ids, --prompts or --prompt-tokens was given.
  bool active = false;
  std::vector<int64_t> promptIds;
  /// --prompts FILE: one prompt per line, decoded one after another.
  std::string promptsFile;
  /// --prompt-tokens P: a prompt of P ids drawn from --seed (0: not given).
  int64_t promptTokens = 0;
  moert::GenerateOptions options;
  bool stream = false;
  /// --ignore-eos: do not stop at the plan's end-of-sequence ids.
  bool ignoreEos = false;
  /// --kv-cache in-place (default) or copy (SessionOptions::kvCacheInPlace).
  bool kvCacheInPlace = true;
  /// --vision-input NAME=FILE.npy: a multimodal prompt's vision inputs.
  std::vector<std::pair<std::string, std::string>> visionInputs;
  /// --image PATH: image files, in the prompt's order, preprocessed by the
  /// plan's image processor.
  std::vector<std::string> images;
  /// --save-vision-inputs DIR: every vision input of the prompt (given,
  /// from --image, and the grid rule's) written as DIR/NAME.npy.
  std::string saveVisionInputs;
  /// Generation flags seen (for "needs --prompt-ids").
  std::vector<std::string> flags;

  /// Checks the generation options once all are parsed; "" when fine.
  std::string verify() const;
};

/// Reads `args`'s --vision-input files and --image files (preprocessed by
/// `plan`'s image processor) into `arrays` and names them in `vision`
/// (pointing into `arrays`); an unreadable or malformed file is an error
/// naming the input and the file. With --save-vision-inputs writes them,
/// and the grid rule's inputs, to that folder.
absl::Status readVisionInputs(const moert::Plan &plan, const GenerateArgs &args,
                              std::vector<moert::npy::Array> &arrays,
                              moert::VisionInputs &vision);

/// Parses generation option `name` with `value` into `args`: nullopt when
/// `name` is no generation option, "" when parsed, else the usage error.
std::optional<std::string> parseGenerateOption(const std::string &name,
                                               const std::string &value,
                                               GenerateArgs &args);

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
  /// A tiered plan's budget, read mode, reads ahead and cache policy
  /// (SessionOptions).
  uint64_t deviceMemory = 0;
  std::string expertRead = "auto";
  std::string expertPrefetch;
  std::string expertCache = "static";
  /// --bench N: time N repetitions of the prompt after `warmup` (0: one
  /// generation, printed).
  int bench = 0;
  int warmup = 1;
};

/// The prompt of --prompt-ids, or of --prompt-tokens P: P ids drawn from
/// `seed`, uniform over the plan's vocabulary (the logits' last dim), with
/// a line saying so in `description`.
absl::StatusOr<std::vector<int64_t>> promptFor(const moert::Plan &plan,
                                               const GenerateArgs &args,
                                               uint64_t seed,
                                               std::string &description);

/// What differs between one device's generator and an expert-parallel
/// group's (shared by generate.cpp and generate_bench.cpp): whether this
/// process reports (rank 0 under MPI), device 0's generator and " on N
/// devices (in-process)" for the summary.
bool reports(const moert::Generator &generator);
bool reports(const moert::GroupGenerator &group);
moert::Generator &firstGenerator(moert::Generator &generator);
moert::Generator &firstGenerator(moert::GroupGenerator &group);
std::string describeDevices(const moert::Generator &generator);
std::string describeDevices(const moert::GroupGenerator &group);

/// Appends the --stats fields a generation's timing does not give: device
/// 0's per-step statistics of the decode and prefill schedules, the MoE
/// layers (merged over the devices, with each device's traffic), the
/// process's memory and a tiered plan's expert cache (also printed to
/// `log`). Collective under MPI.
absl::Status appendGenerationDetails(std::string &json, const moert::Plan &plan,
                                     moert::Generator &generator, FILE *log);
absl::Status appendGenerationDetails(std::string &json, const moert::Plan &plan,
                                     moert::GroupGenerator &group, FILE *log);

/// Generates with `plan` for each prompt in turn: the ids to stdout, one
/// line per prompt (as they come with --stream), a summary line to stderr,
/// DIR/tokens.npy and DIR/logits.npy with an output directory, the
/// statistics JSON with `statsPath` (under MPI, rank 0 writes them all).
absl::Status runGeneration(const moert::Plan &plan, const GenerateArgs &args,
                           const GenerationRun &run, Recording &recording);

} // namespace moe_run

#endif // MOE_RUN_GENERATE_H
