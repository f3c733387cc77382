//===- generation_loop.cpp - What the generators share -------------------===//

#include "generate/generation_loop.h"

#include "loader/plan_impl.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>

namespace moert::detail {

absl::StatusOr<const GenerationDesc *> generationOf(const Plan &plan) {
  if (const GenerationDesc *gen = plan.generation())
    return gen;
  return absl::FailedPreconditionError(absl::StrCat(
      plan.impl().source,
      ": not a generation plan (compile one with moec compile DECODE.onnx "
      "[--prefill PREFILL.onnx] --max-seq S)"));
}

absl::Status checkIds(const std::vector<int64_t> &ids, int64_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at position ", i,
                       " is outside the vocabulary [0, ", vocab, ")"));
  return absl::OkStatus();
}

absl::Status checkPrompt(const std::vector<int64_t> &prompt,
                         const GenerationDesc &gen) {
  if (prompt.empty())
    return absl::InvalidArgumentError("the prompt is empty");
  if (static_cast<int64_t>(prompt.size()) >= gen.maxSeq)
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt has ", prompt.size(),
                     " tokens, leaving no room for a new one in the plan's "
                     "max_seq of ",
                     gen.maxSeq, " (moec compile --max-seq)"));
  return checkIds(prompt, gen.vocabSize);
}

absl::Status checkGenerateOptions(const std::vector<int64_t> &prompt,
                                  const GenerateOptions &options,
                                  const GenerationDesc &gen) {
  MOERT_RETURN_IF_ERROR(Sampler::validate(options.sampling));
  if (options.maxNewTokens < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("the number of new tokens must be at least 1, not ",
                     options.maxNewTokens));
  int64_t total = static_cast<int64_t>(prompt.size()) + options.maxNewTokens;
  if (options.maxNewTokens > gen.maxSeq || total > gen.maxSeq)
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt's ", prompt.size(), " tokens plus ", options.maxNewTokens,
        " new ones make ", total, ", more than the plan's max_seq of ",
        gen.maxSeq, " (moec compile --max-seq)"));
  return absl::OkStatus();
}

std::function<absl::StatusOr<bool>()>
localStop(const GenerateOptions &options) {
  if (!options.stopRequested)
    return {};
  return
      [&options]() -> absl::StatusOr<bool> { return options.stopRequested(); };
}

absl::StatusOr<std::vector<int64_t>>
runGenerationLoop(const std::vector<int64_t> &prompt,
                  const GenerateOptions &options, const GenerationSteps &steps,
                  const std::function<void(int64_t)> &onToken,
                  GenerationTimes &times) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point from) {
    return std::chrono::duration<double>(Clock::now() - from).count();
  };
  times = GenerationTimes();
  times.promptTokens = static_cast<int64_t>(prompt.size());
  Sampler sampler(options.sampling);
  Clock::time_point start = Clock::now();
  MOERT_RETURN_IF_ERROR(steps.prefill(prompt));
  times.prefillSeconds = seconds(start);
  std::vector<int64_t> tokens;
  Clock::time_point decodeStart;
  while (true) {
    MOERT_ASSIGN_OR_RETURN(int64_t token, steps.next(sampler));
    tokens.push_back(token);
    if (tokens.size() == 1) {
      times.firstTokenSeconds = seconds(start);
      decodeStart = Clock::now();
    }
    if (onToken)
      onToken(token);
    bool stop = std::find(options.stopIds.begin(), options.stopIds.end(),
                          token) != options.stopIds.end();
    if (stop || static_cast<int64_t>(tokens.size()) == options.maxNewTokens)
      break;
    if (steps.stop) {
      MOERT_ASSIGN_OR_RETURN(times.stoppedEarly, steps.stop());
      if (times.stoppedEarly)
        break;
    }
    MOERT_RETURN_IF_ERROR(steps.decode(token));
    ++times.decodeSteps;
  }
  times.decodeSeconds = seconds(decodeStart);
  times.newTokens = static_cast<int64_t>(tokens.size());
  return tokens;
}

} // namespace moert::detail
