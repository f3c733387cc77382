//===- generation_loop.h - What the generators share ------------*- C++ -*-===//
//
// The argument checks and the token loop of a generation, shared by the
// single-device moert::Generator and the expert-parallel
// moert::GroupGenerator: they differ only in how a prefill or decode step
// runs (one session, or every device's in lockstep) and in where the next
// token comes from (drawn here, or under MPI drawn by rank 0 and received).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_GENERATION_LOOP_H
#define MOERT_SRC_GENERATION_LOOP_H

#include "moert/generator.h"

#include <functional>

namespace moert::detail {

/// The generation table of `plan`; fails with "PLAN: not a generation
/// plan (...)" for any other plan.
absl::StatusOr<const GenerationDesc *> generationOf(const Plan &plan);

/// Checks that token ids are in the vocabulary.
absl::Status checkIds(const std::vector<int64_t> &ids, int64_t vocab);

/// Checks a prompt for a prefill: not empty, leaving room for one new token
/// in `gen.maxSeq`, every id in the vocabulary.
absl::Status checkPrompt(const std::vector<int64_t> &prompt,
                         const GenerationDesc &gen);

/// Checks `options` for a generation from `prompt`: valid sampling, at
/// least one new token, prompt plus new tokens within max_seq.
absl::Status checkGenerateOptions(const std::vector<int64_t> &prompt,
                                  const GenerateOptions &options,
                                  const GenerationDesc &gen);

/// steps.stop for a generator that asks options.stopRequested itself (not
/// under MPI).
std::function<absl::StatusOr<bool>()> localStop(const GenerateOptions &options);

/// The steps a generation loop drives.
struct GenerationSteps {
  /// Runs the prompt; the logits of its last position are then available.
  std::function<absl::Status(const std::vector<int64_t> &)> prefill;
  /// Runs one token at the next position.
  std::function<absl::Status(int64_t)> decode;
  /// The next token after the last step (drawn by `sampler` from its
  /// logits, or received from the device that drew it).
  std::function<absl::StatusOr<int64_t>(Sampler &)> next;
  /// Whether to end the generation after the token just drawn
  /// (GenerateOptions::stopRequested, or under MPI rank 0's answer); empty:
  /// never.
  std::function<absl::StatusOr<bool>()> stop;
};

/// Prefill, then up to options.maxNewTokens tokens, each passed to
/// `onToken` as soon as it exists; stops after a stop id or when
/// steps.stop says so. Fills `times`.
/// The options must have passed checkGenerateOptions.
absl::StatusOr<std::vector<int64_t>>
runGenerationLoop(const std::vector<int64_t> &prompt,
                  const GenerateOptions &options, const GenerationSteps &steps,
                  const std::function<void(int64_t)> &onToken,
                  GenerationTimes &times);

} // namespace moert::detail

#endif // MOERT_SRC_GENERATION_LOOP_H
