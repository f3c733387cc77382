//===- generate.cpp - moe-run's token generation mode --------------------===//

#include "generate.h"

#include "moert/file_io.h"
#include "moert/npy.h"
#include "recording.h"
#include "stats_json.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

#include <cstdio>
#include <filesystem>

namespace moe_run {
namespace {

/// "3,14,15" -> {3, 14, 15}; false on anything else.
bool parseIds(const std::string &text, std::vector<int64_t> &ids) {
  ids.clear();
  if (text.empty())
    return false;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(part, &id))
      return false;
    ids.push_back(id);
  }
  return true;
}

} // namespace

std::optional<std::string> parseGenerateOption(const std::string &name,
                                               const std::string &value,
                                               GenerateArgs &args) {
  moert::GenerateOptions &options = args.options;
  int64_t number = 0;
  double real = 0;
  if (name == "--prompt-ids") {
    if (!parseIds(value, args.promptIds))
      return "--prompt-ids needs comma-separated integer token ids, e.g. "
             "3,14,15, not '" +
             value + "'";
    args.active = true;
    return "";
  }
  args.flags.push_back(name);
  if (name == "--max-new-tokens") {
    if (!absl::SimpleAtoi(value, &number) || number < 1 ||
        number > (int64_t{1} << 40))
      return "--max-new-tokens needs a positive integer, not '" + value + "'";
    options.maxNewTokens = number;
  } else if (name == "--temperature") {
    if (!absl::SimpleAtod(value, &real) || !(real >= 0) || real > 1e6)
      return "--temperature needs a number >= 0 (0: greedy), not '" + value +
             "'";
    options.sampling.temperature = real;
  } else if (name == "--top-k") {
    if (!absl::SimpleAtoi(value, &number) || number < 0)
      return "--top-k needs an integer >= 0 (0: all), not '" + value + "'";
    options.sampling.topK = number;
  } else if (name == "--top-p") {
    if (!absl::SimpleAtod(value, &real) || !(real > 0 && real <= 1))
      return "--top-p needs a number in (0, 1], not '" + value + "'";
    options.sampling.topP = real;
  } else if (name == "--stop-id") {
    if (!absl::SimpleAtoi(value, &number) || number < 0)
      return "--stop-id needs a token id, not '" + value + "'";
    options.stopIds.push_back(number);
  } else {
    args.flags.pop_back();
    return std::nullopt;
  }
  return "";
}

std::string checkGenerateArgs(const GenerateArgs &args) {
  if (!args.active && (!args.flags.empty() || args.stream))
    return (args.flags.empty() ? std::string("--stream") : args.flags.front()) +
           " generates tokens; it needs --prompt-ids";
  return "";
}

absl::Status runGeneration(const moert::Plan &plan, const GenerateArgs &args,
                           int threads, uint64_t seed,
                           const std::string &outputDir,
                           const std::string &planPath,
                           const std::string &statsPath, Recording &recording) {
  moert::SessionOptions sessionOptions;
  sessionOptions.threads = threads;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Generator> generator,
                         moert::Generator::create(plan, sessionOptions));
  attachRecording(recording, *generator);
  moert::GenerateOptions options = args.options;
  options.sampling.seed = seed;
  std::vector<float> logits;
  int64_t vocab = generator->vocabSize();
  bool first = true;
  MOERT_ASSIGN_OR_RETURN(
      std::vector<int64_t> tokens,
      generator->generate(args.promptIds, options, [&](int64_t token) {
        const std::vector<float> &row = generator->logits();
        logits.insert(logits.end(), row.begin(), row.end());
        if (args.stream) {
          std::printf(first ? "%lld" : " %lld", static_cast<long long>(token));
          std::fflush(stdout);
        }
        first = false;
      }));
  if (!args.stream)
    for (size_t i = 0; i < tokens.size(); ++i)
      std::printf(i ? " %lld" : "%lld", static_cast<long long>(tokens[i]));
  std::printf("\n");
  std::fflush(stdout);

  const moert::GenerationTimes &t = generator->times();
  double prefillRate =
      t.prefillSeconds > 0 ? t.promptTokens / t.prefillSeconds : 0;
  double decodeRate = t.decodeSeconds > 0 ? t.decodeSteps / t.decodeSeconds : 0;
  std::fprintf(stderr,
               "moe-run: %lld new tokens; time to first token %.3f ms; "
               "prefill %lld tokens at %.1f tokens/s; decode %lld tokens at "
               "%.1f tokens/s; KV cache %llu bytes\n",
               static_cast<long long>(t.newTokens), t.firstTokenSeconds * 1e3,
               static_cast<long long>(t.promptTokens), prefillRate,
               static_cast<long long>(t.decodeSteps), decodeRate,
               static_cast<unsigned long long>(generator->cacheBytes()));

  if (!outputDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(outputDir, ec);
    if (ec)
      return absl::NotFoundError(
          absl::StrCat(outputDir, ": cannot create directory: ", ec.message()));
    std::filesystem::path dir(outputDir);
    MOERT_RETURN_IF_ERROR(
        moert::npy::write((dir / "tokens.npy").string(), moert::DType::I64,
                          {static_cast<int64_t>(tokens.size())}, tokens.data(),
                          tokens.size() * sizeof(int64_t)));
    MOERT_RETURN_IF_ERROR(
        moert::npy::write((dir / "logits.npy").string(), moert::DType::F32,
                          {static_cast<int64_t>(tokens.size()), vocab},
                          logits.data(), logits.size() * sizeof(float)));
  }
  recording.config().promptTokens = t.promptTokens;
  recording.config().newTokens = t.newTokens;
  MOERT_RETURN_IF_ERROR(
      finishRecording(recording, plan, generator->decodeSession()));
  if (statsPath.empty())
    return absl::OkStatus();
  const moert::GenerationDesc &gen = *plan.generation();
  std::string json = absl::StrCat(
      "{\n  \"plan\": ", jsonString(planPath),
      ",\n  \"threads\": ", generator->decodeSession().threads(),
      ",\n  \"prompt_tokens\": ", t.promptTokens,
      ",\n  \"new_tokens\": ", t.newTokens,
      ",\n  \"decode_steps\": ", t.decodeSteps,
      ",\n  \"time_to_first_token_ms\": ",
      absl::StrFormat("%.6f", t.firstTokenSeconds * 1e3),
      ",\n  \"prefill_ms\": ", absl::StrFormat("%.6f", t.prefillSeconds * 1e3),
      ",\n  \"decode_ms\": ", absl::StrFormat("%.6f", t.decodeSeconds * 1e3),
      ",\n  \"prefill_tokens_per_s\": ", absl::StrFormat("%.3f", prefillRate),
      ",\n  \"decode_tokens_per_s\": ", absl::StrFormat("%.3f", decodeRate),
      ",\n  \"max_seq\": ", gen.maxSeq,
      ",\n  \"kv_cache_bytes\": ", generator->cacheBytes(),
      ",\n  \"kv_cache_bytes_at_max_seq\": ", gen.cacheBytes);
  appendSteps(json, "decode_steps_stats",
              generator->decodeSession().stepStats());
  if (gen.hasPrefill)
    appendSteps(json, "prefill_steps_stats",
                generator->prefillSession().stepStats());
  absl::StrAppend(&json, "\n}\n");
  return moert::writeFile(statsPath, json.data(), json.size());
}

} // namespace moe_run
