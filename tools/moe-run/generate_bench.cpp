//===- generate_bench.cpp - moe-run's generation benchmark ----------------===//

#include "generate_bench.h"

#include "bench_stats.h"
#include "format/file_io.h"
#include "moert/group_generator.h"
#include "recording.h"
#include "stats_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

namespace moe_run {
namespace {

/// Columns a UTF-8 string takes ("±" is two bytes, one column).
size_t columns(const std::string &text) {
  size_t n = 0;
  for (char c : text)
    n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

/// A Markdown table, as llama-bench prints one: `right[i]` right-aligns
/// column i (numbers).
std::string markdownTable(const std::vector<std::string> &header,
                          const std::vector<bool> &right,
                          const std::vector<std::vector<std::string>> &rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = columns(header[c]);
    for (const std::vector<std::string> &row : rows)
      width[c] = std::max(width[c], columns(row[c]));
  }
  auto line = [&](const std::vector<std::string> &cells) {
    std::string out = "|";
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string pad(width[c] - columns(cells[c]), ' ');
      absl::StrAppend(&out, " ", right[c] ? pad + cells[c] : cells[c] + pad,
                      " |");
    }
    return out + "\n";
  };
  std::string text = line(header);
  text += "|";
  for (size_t c = 0; c < header.size(); ++c)
    absl::StrAppend(&text, " ", std::string(width[c] - right[c], '-'),
                    right[c] ? ":" : "", " |");
  text += "\n";
  for (const std::vector<std::string> &row : rows)
    text += line(row);
  return text;
}

std::string rate(const Summary &s) {
  return absl::StrFormat("%.2f ± %.2f", s.mean, s.stddev);
}

std::string ms(double value) { return absl::StrFormat("%.3f ms", value); }

/// `"key": {"mean": ..., "stddev": ..., "p50": ..., "p99": ...` and, with
/// `all`, every value; the caller closes the object.
void appendSeries(std::string &json, const char *key,
                  const std::vector<double> &values, bool all) {
  Summary s = summarize(values);
  absl::StrAppendFormat(&json,
                        ",\n  \"%s\": {\"mean\": %.6f, \"stddev\": %.6f, "
                        "\"p50\": %.6f, \"p99\": %.6f, \"min\": %.6f, "
                        "\"max\": %.6f, \"count\": %d",
                        key, s.mean, s.stddev, s.p50, s.p99, s.min, s.max,
                        s.count);
  if (all)
    absl::StrAppend(&json, ", \"per_repetition\": [",
                    absl::StrJoin(values, ", ",
                                  [](std::string *out, double v) {
                                    absl::StrAppend(out,
                                                    absl::StrFormat("%.6f", v));
                                  }),
                    "]");
  absl::StrAppend(&json, "}");
}

/// Clears the sessions' statistics after the warm-up, so that --stats,
/// --trace and --report-html hold the timed repetitions only.
void resetStats(moert::Generator &generator) {
  generator.prefillSession().resetStats();
  generator.decodeSession().resetStats();
}
void resetStats(moert::GroupGenerator &group) { group.resetStats(); }

template <typename GeneratorT>
absl::Status bench(GeneratorT &generator, const moert::Plan &plan,
                   const GenerateArgs &args, const GenerationRun &run,
                   Recording &recording) {
  std::string drawn;
  MOERT_ASSIGN_OR_RETURN(std::vector<int64_t> prompt,
                         promptFor(plan, args, run.seed, drawn));
  bool root = reports(generator);
  if (root && !drawn.empty())
    std::fprintf(stderr, "moe-run: %s\n", drawn.c_str());
  attachRecording(recording, generator);
  moert::GenerateOptions options = args.options;
  options.sampling.seed = run.seed;
  std::vector<moert::npy::Array> arrays;
  moert::VisionInputs vision;
  MOERT_RETURN_IF_ERROR(readVisionInputs(plan, args, arrays, vision));
  auto generate = [&](const std::function<void(int64_t)> &onToken) {
    return generator.generate(prompt, vision, options, onToken);
  };
  for (int i = 0; i < run.warmup; ++i)
    MOERT_RETURN_IF_ERROR(generate({}).status());
  resetStats(generator);

  using Clock = std::chrono::steady_clock;
  GenerationBench result;
  result.plan = run.planPath;
  result.threads = firstGenerator(generator).decodeSession().threads();
  result.warmup = run.warmup;
  result.promptTokens = static_cast<int64_t>(prompt.size());
  result.newTokens = options.maxNewTokens;
  std::vector<Clock::time_point> stamps;
  stamps.reserve(options.maxNewTokens);
  for (int i = 0; i < run.bench; ++i) {
    stamps.clear();
    MOERT_ASSIGN_OR_RETURN(std::vector<int64_t> tokens, generate([&](int64_t) {
                             stamps.push_back(Clock::now());
                           }));
    const moert::GenerationTimes &t = generator.times();
    recording.addGeneration(t);
    // No stop ids with --bench: every repetition decodes the same steps.
    if (static_cast<int64_t>(tokens.size()) != options.maxNewTokens ||
        t.prefillSeconds <= 0 || t.decodeSeconds <= 0)
      return absl::InternalError(absl::StrCat(
          "generation benchmark: repetition ", i + 1, " generated ",
          tokens.size(), " of ", options.maxNewTokens, " tokens"));
    result.prefillTokensPerS.push_back(t.promptTokens / t.prefillSeconds);
    result.decodeTokensPerS.push_back(t.decodeSteps / t.decodeSeconds);
    result.firstTokenMs.push_back(t.firstTokenSeconds * 1e3);
    if (t.visionSeconds > 0)
      result.visionMs.push_back(t.visionSeconds * 1e3);
    for (size_t k = 1; k < stamps.size(); ++k)
      result.interTokenMs.push_back(
          std::chrono::duration<double, std::milli>(stamps[k] - stamps[k - 1])
              .count());
  }
  if (root) {
    std::string devices = describeDevices(generator);
    std::printf("moe-run: generation benchmark of %s%s: %s after %s, %s, "
                "%s\n",
                run.planPath.c_str(), devices.c_str(),
                plural(run.bench, "repetition", "repetitions").c_str(),
                plural(run.warmup, "warm-up", "warm-ups").c_str(),
                plural(result.threads, "thread", "threads").c_str(),
                options.sampling.temperature > 0 ? "sampled" : "greedy");
    std::fputs(benchTable(result).c_str(), stdout);
    std::fflush(stdout);
  }
  recording.config().promptTokens = result.promptTokens;
  recording.config().newTokens = result.newTokens;
  MOERT_RETURN_IF_ERROR(finishRecording(recording, plan, generator));
  if (run.statsPath.empty())
    return absl::OkStatus();
  const moert::GenerationDesc &gen = *plan.generation();
  moert::Generator &local = firstGenerator(generator);
  std::string json = absl::StrCat("{\n  \"plan\": ", jsonString(run.planPath));
  appendBenchJson(json, result);
  absl::StrAppend(&json, ",\n  \"max_seq\": ", gen.maxSeq,
                  ",\n  \"kv_cache_bytes\": ", generator.cacheBytes(),
                  ",\n  \"kv_caches\": ", local.numCaches(),
                  ",\n  \"kv_caches_in_place\": ", local.cachesInPlace());
  MOERT_RETURN_IF_ERROR(appendGenerationDetails(json, plan, generator, stderr));
  absl::StrAppend(&json, "\n}\n");
  if (!root)
    return absl::OkStatus();
  return moert::writeFile(run.statsPath, json.data(), json.size());
}

} // namespace

std::string benchTable(const GenerationBench &bench) {
  std::string plan = std::filesystem::path(bench.plan).filename().string();
  std::string threads = absl::StrCat(bench.threads);
  std::string text = markdownTable(
      {"plan", "threads", "test", "t/s"}, {false, true, false, true},
      {{plan, threads, absl::StrCat("pp ", bench.promptTokens),
        rate(summarize(bench.prefillTokensPerS))},
       {plan, threads, absl::StrCat("tg ", bench.newTokens),
        rate(summarize(bench.decodeTokensPerS))}});
  Summary first = summarize(bench.firstTokenMs);
  Summary between = summarize(bench.interTokenMs);
  std::vector<std::vector<std::string>> rows = {
      {"time to first token", ms(first.p50), ms(first.p99)},
      {"inter-token", ms(between.p50), ms(between.p99)}};
  if (!bench.visionMs.empty()) {
    Summary vision = summarize(bench.visionMs);
    rows.insert(rows.begin(),
                {"vision encode", ms(vision.p50), ms(vision.p99)});
  }
  text += "\n";
  text += markdownTable({"latency", "p50", "p99"}, {false, true, true}, rows);
  return text;
}

void appendBenchJson(std::string &json, const GenerationBench &bench) {
  absl::StrAppend(
      &json, ",\n  \"threads\": ", bench.threads,
      ",\n  \"bench\": true, \"repetitions\": ", bench.prefillTokensPerS.size(),
      ", \"warmup_repetitions\": ", bench.warmup,
      ",\n  \"prompt_tokens\": ", bench.promptTokens,
      ", \"new_tokens\": ", bench.newTokens,
      ", \"decode_steps\": ", bench.newTokens - 1);
  absl::StrAppend(&json, ",\n  \"tests\": [{\"test\": ",
                  jsonString(absl::StrCat("pp ", bench.promptTokens)),
                  ", \"tokens\": ", bench.promptTokens);
  Summary pp = summarize(bench.prefillTokensPerS);
  Summary tg = summarize(bench.decodeTokensPerS);
  absl::StrAppendFormat(&json,
                        ", \"tokens_per_s\": %.3f, \"stddev\": %.3f}, "
                        "{\"test\": %s, \"tokens\": %d, \"tokens_per_s\": "
                        "%.3f, \"stddev\": %.3f}]",
                        pp.mean, pp.stddev,
                        jsonString(absl::StrCat("tg ", bench.newTokens)),
                        bench.newTokens, tg.mean, tg.stddev);
  appendSeries(json, "prefill_tokens_per_s", bench.prefillTokensPerS, true);
  appendSeries(json, "decode_tokens_per_s", bench.decodeTokensPerS, true);
  appendSeries(json, "time_to_first_token_ms", bench.firstTokenMs, true);
  appendSeries(json, "inter_token_ms", bench.interTokenMs, false);
  if (!bench.visionMs.empty())
    appendSeries(json, "vision_encode_ms", bench.visionMs, true);
}

absl::Status benchGeneration(moert::Generator &generator,
                             const moert::Plan &plan, const GenerateArgs &args,
                             const GenerationRun &run, Recording &recording) {
  return bench(generator, plan, args, run, recording);
}

absl::Status benchGeneration(moert::GroupGenerator &group,
                             const moert::Plan &plan, const GenerateArgs &args,
                             const GenerationRun &run, Recording &recording) {
  return bench(group, plan, args, run, recording);
}

} // namespace moe_run
