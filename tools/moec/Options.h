//===- Options.h - moec's command line ---------------------------*- C++
//-*-===//
//
// moec's options (docs/cli.md), one struct per concern, each with its own
// verify(), as IREE's pipeline options are. Options.cpp registers every
// llvm::cl option in one place; the drivers read these structs only, so a
// cross-flag rule is written once, beside the flags it relates, and the
// compile flow starts from options already known to be consistent.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_OPTIONS_H
#define MOEC_TOOLS_MOEC_OPTIONS_H

#include "GenaiFolder.h"
#include "compiler/plan/PlanEmitter.h"

#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moec {

/// moec's exit status: 0 on success, 1 when the model is invalid, uses an
/// unsupported op or fails to compile, 2 on a usage error.
enum ExitCode { kSuccess = 0, kFailure = 1, kUsageError = 2 };

/// The subcommand parsed from the command line.
enum class Command { None, Check, Ops, Compile, Inspect };

/// The category of moec's options, the only ones `moec --help` lists.
llvm::cl::OptionCategory &getMoecCategory();

/// The subcommand the parsed command line selected.
Command getCommand();

/// Records the subcommand named in argv[1] (before parsing), which usage
/// errors name in their hint.
void setCommandName(llvm::StringRef name);

/// Reports a usage error, `moec: error: MESSAGE` and a one-line hint, and
/// returns kUsageError.
int usageError(const llvm::Twine &message);

/// The positional arguments and --json of check, ops and inspect.
struct DriverOptions {
  std::string model;
  std::string plan;
  bool json = false;
};

/// The parsed options of check, ops and inspect.
DriverOptions getDriverOptions();

/// What is compiled: the model (or the decode graph of a generation pair)
/// and --prefill.
struct InputOptions {
  std::string model;
  std::string prefill;
  /// The builder folder being compiled, whose eos ids the plan records and
  /// whose tokenizer files go beside it; empty when compiling a model file.
  std::optional<GenaiFolder> folder;
  /// --widen-f16 (onnx_import::ImportOptions::widenFloat16).
  bool widenFloat16 = false;
};

/// The bounds buffers are planned for: --max-tokens, --bound, --max-seq,
/// and the sizes --dim fixes.
struct ShapeOptions {
  uint64_t maxTokens = 256;
  bool maxTokensGiven = false;
  std::vector<std::string> dimBounds;
  /// --dim NAME=N: input dimensions fixed to a size (a vision-language
  /// folder's graphs).
  std::vector<std::string> fixedDims;
  uint64_t maxSeq = 0;
  bool maxSeqGiven = false;

  /// The usage error of --max-tokens or a --bound, or "".
  std::string verify() const;
  /// The usage error of --max-seq, or "".
  std::string verifyMaxSeq() const;
};

/// What is written and where: -o, --emit, --import-only, --emit-weights.
struct OutputOptions {
  std::string output = "-";
  std::string emit = "plan";
  bool importOnly = false;
  bool emitWeights = false;

  /// The usage error of an unknown --emit, or "".
  std::string verify() const;
  /// The usage error of an output that --emit cannot have (a plan to
  /// stdout, --import-only past the import), or "".
  std::string verifyStages() const;
};

/// What the compile reports besides its output: --report, --verbose,
/// --quiet and the test-only progress line.
struct ReportOptions {
  std::string report;
  bool verbose = false;
  bool quiet = false;
  bool testProgress = false;

  /// The usage error of a report that `output`'s --emit has nothing for,
  /// or "".
  std::string verify(const OutputOptions &output) const;
  /// Whether to show progress: on a terminal, unless --verbose already
  /// prints (a rewritten line would mix with it).
  bool showProgress() const;
};

/// The backend the plan is for: --target, --cuda-arch, --ptx-output,
/// --cuda-source.
struct TargetOptions {
  std::string target = "cpu";
  std::string cudaArch = "sm_90";
  bool cudaArchGiven = false;
  std::string ptxOutput;
  std::string cudaSource;

  bool isCuda() const { return target == "cuda"; }
  /// The usage error of a target flag, or of a cuda target `output` does
  /// not emit a plan for, or "".
  std::string verify(const OutputOptions &output) const;
  /// --cuda-arch's number (90 for sm_90); verify() has checked it parses.
  uint32_t getCudaArch() const;
};

/// Expert parallelism: --devices, --micro-batches, --replicate-hot,
/// --routing-profile.
struct ParallelOptions {
  int64_t devices = 1;
  int64_t microBatches = 1;
  bool microBatchesGiven = false;
  int64_t replicateHot = 0;
  std::string routingProfile;

  /// The usage error of a flag out of range, or of --replicate-hot without
  /// a profile, or "". One-pass and generation compiles share it.
  std::string verify() const;
  /// The usage error of expert-parallel flags on a model `output`'s
  /// --emit does not plan, or "".
  std::string verify(const OutputOptions &output) const;
};

struct TierFlags;

/// How the plan stores its large matrices: --weight-dtype, --keep-f32,
/// --int8-activations.
struct WeightOptions {
  std::string weightDtype = "f32";
  bool weightDtypeGiven = false;
  /// The names of dense matrices that stay f32 (plan::keepDenseWeightsWide).
  std::vector<std::string> keepF32;
  /// --int8-activations (with --weight-dtype int4).
  bool int8Activations = false;

  /// --weight-dtype as the ExpertWeightType the plan writer narrows to;
  /// nullopt for an unknown name. int4 is F32 there: its matrices are
  /// block-quantized constants before the plan is written (isInt4).
  std::optional<plan::ExpertWeightType> getExpertWeightType() const;
  /// Whether --weight-dtype is int4 (plan::quantizeWeightsToInt4).
  bool isInt4() const { return weightDtype == "int4"; }
  /// Whether --weight-dtype narrows any matrix.
  bool narrows() const { return weightDtype != "f32"; }
  /// The usage error of an unknown --weight-dtype or of one `target` does
  /// not run, or "".
  std::string verify(const TargetOptions &target) const;
  /// The usage error of --weight-dtype on a model `output` does not plan,
  /// or "".
  std::string verify(const OutputOptions &output) const;
  /// The usage error of --weight-dtype int4 with expert parallelism or
  /// tiers (not supported yet), or "".
  std::string verify(const ParallelOptions &parallel,
                     const TierFlags &tiers) const;
};

/// Tiered experts: --device-memory, --prefetch.
struct TierFlags {
  std::string deviceMemory;
  std::string prefetch = "none";

  /// --device-memory's bytes: 0 without it, nullopt when it is no byte
  /// count.
  std::optional<uint64_t> getDeviceMemoryBytes() const;
  /// The usage error of --prefetch, of a profile or micro-batches that
  /// `parallel` has no use for, or of --device-memory, or "".
  std::string verify(const ParallelOptions &parallel) const;
  /// The usage error of --device-memory with an --emit other than plan, or
  /// "".
  std::string verify(const OutputOptions &output) const;
};

/// Translation validation of the MoE rewrites: --no-verify-rewrites and
/// the test-only corruption.
struct ValidationFlags {
  bool enabled = true;
  bool testCorruptRewrite = false;
};

/// Everything `moec compile` was asked, one struct per concern.
struct CompileFlags {
  InputOptions input;
  ShapeOptions shapes;
  OutputOptions output;
  ReportOptions report;
  TargetOptions target;
  ParallelOptions parallel;
  WeightOptions weights;
  TierFlags tiers;
  ValidationFlags validation;
  /// Whether a generation plan is compiled (--max-seq, --prefill or a
  /// builder folder).
  bool generation = false;

  /// Checks the mode (a one-pass or a generation plan), then each concern,
  /// in a fixed order: "" when every flag applies, else the usage error
  /// naming the first one that does not.
  std::string verify() const;
  /// The usage error of the first output path that cannot be written, or
  /// "": found now rather than after a long compile.
  std::string verifyOutputPaths() const;
  /// The compile options that shape a plan, as the plan's provenance
  /// records them (defaults included, in this fixed order).
  std::vector<std::pair<std::string, std::string>> getProvenanceFlags() const;

private:
  std::string verifyOnePass() const;
  std::string verifyGeneration() const;
};

/// The parsed options of `moec compile`, as given (a builder folder is
/// resolved by the compile flow).
CompileFlags getCompileFlags();

} // namespace moec

#endif // MOEC_TOOLS_MOEC_OPTIONS_H
