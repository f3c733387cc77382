//===- generated_inputs.h - moe-run's given or generated inputs -*- C++ -*-===//
//
// The values moe-run feeds a plan's graph inputs: read from `--input
// NAME=FILE.npy`, or generated from `--seed` (docs/cli.md, "Inputs"). A
// symbolic dimension of a generated input takes `--dim SYMBOL=N`; else the
// token axis (tokenAxis: the sequence of a `[batch, seq]` input, or the only
// symbolic dim) takes `--tokens N`, else 16 (clamped to the symbol's range,
// with a note); every other symbolic dim takes 1, or the size the plan fixes
// it to. So `--tokens N` runs N tokens, never the bound by default, which
// would run the largest batch the plan allows. Integers take the plan's
// value range (for token ids the embedding table's rows, recorded by moec),
// floats [-1, 1), bools {0, 1}.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_GENERATED_INPUTS_H
#define MOE_RUN_GENERATED_INPUTS_H

#include "moert/moert.h"
#include "moert/npy.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace moe_run {

/// The token axis of generated inputs takes this many tokens by default.
constexpr int64_t kDefaultTokens = 16;

struct InputOptions {
  /// --input NAME=FILE.npy, in command-line order.
  std::vector<std::pair<std::string, std::string>> given;
  /// --tokens (-1: not given) and --dim SYMBOL=N.
  int64_t tokens = -1;
  std::map<std::string, int64_t> dims;
  uint64_t seed = 0;
};

/// One graph input's value for a run.
struct RunInput {
  std::string name;
  moert::npy::Array array;
  /// The .npy file it was read from; empty when generated.
  std::string path;
  /// For a generated input, one line saying how (shape, dtype, range, seed).
  std::string description;
};

/// The symbol that `--tokens` sizes: the last symbolic dim of the token ids
/// (the generation plan's, else an integer input with a value range, which
/// moec records for ids that index an embedding), else of the first input
/// with a symbolic dim; "" when no input has one.
std::string tokenAxis(const moert::Plan &plan);

/// The inputs of every graph input of `plan`, in the plan's order: the given
/// ones read (after checking their names), the others generated from
/// `options.seed` in that order. Notes (a default size clamped to a symbol's
/// range) are appended to `notes`.
absl::StatusOr<std::vector<RunInput>>
prepareInputs(const moert::Plan &plan, const InputOptions &options,
              std::vector<std::string> &notes);

/// The size each symbol of `plan` takes in `inputs` (from the first input
/// that has it), for the tokens a run computes.
std::map<std::string, int64_t> symbolSizes(const moert::Plan &plan,
                                           const std::vector<RunInput> &inputs);

/// Writes every input as DIR/NAME.npy (fileNameFor), creating DIR.
absl::Status saveInputs(const std::string &dir,
                        const std::vector<RunInput> &inputs);

/// The file name of tensor `name`: characters outside [A-Za-z0-9._-] become
/// '_', plus ".npy".
std::string fileNameFor(const std::string &name);

/// Creates directory `dir` (and its parents) when missing.
absl::Status makeDirectory(const std::string &dir);

} // namespace moe_run

#endif // MOE_RUN_GENERATED_INPUTS_H
