//===- generate.cpp - moe-run's token generation mode --------------------===//

#include "generate.h"

#include "expert_cache_report.h"
#include "format/file_io.h"
#include "generate_bench.h"
#include "group_session.h"
#include "moert/group_generator.h"
#include "moert/npy.h"
#include "moert/vision.h"
#include "recording.h"
#include "stats_json.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

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

/// What one prompt's generation produced.
struct PromptResult {
  std::vector<int64_t> tokens;
  /// One row of logits per new token.
  std::vector<float> logits;
  moert::GenerationTimes times;
};

} // namespace

absl::StatusOr<std::vector<std::vector<int64_t>>>
readPromptsFile(const std::string &path) {
  constexpr uint64_t kMaxBytes = uint64_t(1) << 20;
  constexpr size_t kMaxPrompts = 4096;
  absl::StatusOr<moert::InputFile> file = moert::InputFile::open(path);
  if (!file.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", file.status().message()));
  absl::StatusOr<std::vector<uint8_t>> bytes = file->readAll(kMaxBytes);
  if (!bytes.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", bytes.status().message()));
  std::string text(bytes->begin(), bytes->end());
  std::vector<std::vector<int64_t>> prompts;
  int lineNumber = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++lineNumber;
    std::vector<int64_t> ids;
    for (absl::string_view part :
         absl::StrSplit(line, absl::ByAnyChar(", \t\r"), absl::SkipEmpty())) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(part, &id))
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": line ", lineNumber, ": '", part,
                         "' is not an integer token id"));
      ids.push_back(id);
    }
    if (ids.empty())
      continue;
    if (prompts.size() == kMaxPrompts)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": more than ", kMaxPrompts, " prompts; split the file"));
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no prompts (one line of token ids each)"));
  return prompts;
}

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
    args.flags.push_back(name);
    return "";
  }
  if (name == "--prompt-tokens") {
    if (!absl::SimpleAtoi(value, &number) || number < 1 ||
        number > (int64_t{1} << 40))
      return "--prompt-tokens needs a positive integer, not '" + value + "'";
    args.promptTokens = number;
    args.active = true;
    args.flags.push_back(name);
    return "";
  }
  if (name == "--prompts") {
    if (value.empty())
      return std::string("--prompts needs a file with one prompt per line");
    args.promptsFile = value;
    args.active = true;
    args.flags.push_back(name);
    return "";
  }
  if (name == "--vision-input") {
    size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == value.size())
      return "--vision-input needs NAME=FILE.npy, not '" + value + "'";
    std::string input = value.substr(0, eq);
    for (const auto &given : args.visionInputs)
      if (given.first == input)
        return "--vision-input " + input + " is given twice";
    args.visionInputs.emplace_back(input, value.substr(eq + 1));
    args.flags.push_back(name);
    return "";
  }
  if (name == "--image") {
    if (value.empty())
      return std::string("--image needs a PNG or JPEG file");
    args.images.push_back(value);
    args.flags.push_back(name);
    return "";
  }
  if (name == "--save-vision-inputs") {
    if (value.empty())
      return std::string("--save-vision-inputs needs a folder");
    args.saveVisionInputs = value;
    args.flags.push_back(name);
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
  } else if (name == "--kv-cache") {
    if (value != "in-place" && value != "copy")
      return "--kv-cache must be in-place or copy, not '" + value + "'";
    args.kvCacheInPlace = value == "in-place";
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

absl::Status readVisionInputs(const moert::Plan &plan, const GenerateArgs &args,
                              std::vector<moert::npy::Array> &arrays,
                              moert::VisionInputs &vision) {
  // The header against the file's size here; the dtype and shape against
  // the plan by the generator.
  arrays.clear();
  vision.clear();
  std::vector<std::string> names;
  for (const auto &[name, path] : args.visionInputs) {
    absl::StatusOr<moert::npy::Array> array = moert::npy::read(path);
    if (!array.ok())
      return absl::Status(array.status().code(),
                          absl::StrCat("--vision-input ", name, ": ",
                                       array.status().message()));
    arrays.push_back(std::move(*array));
    names.push_back(name);
  }
  const moert::MultimodalDesc *mm = plan.multimodal();
  if (!args.images.empty()) {
    if (!mm)
      return absl::InvalidArgumentError("--image needs a multimodal plan");
    absl::StatusOr<std::vector<moert::NamedTensor>> images =
        moert::loadImages(*mm, args.images);
    if (!images.ok())
      return absl::Status(images.status().code(),
                          absl::StrCat("--image: ", images.status().message()));
    for (moert::NamedTensor &t : *images) {
      if (std::count(names.begin(), names.end(), t.name))
        return absl::InvalidArgumentError(
            absl::StrCat("--vision-input ", t.name,
                         " is also what --image gives; give one of them"));
      arrays.push_back({t.dtype, t.shape, std::move(t.bytes)});
      names.push_back(t.name);
    }
  }
  for (size_t i = 0; i < arrays.size(); ++i)
    vision.emplace_back(names[i],
                        moert::TensorData{arrays[i].dtype, arrays[i].shape,
                                          arrays[i].data.data(),
                                          arrays[i].data.size()});
  if (args.saveVisionInputs.empty())
    return absl::OkStatus();
  if (!mm)
    return absl::InvalidArgumentError(
        "--save-vision-inputs needs a multimodal plan");
  std::vector<moert::NamedTensor> rule;
  for (const auto &[name, tensor] : vision)
    if (name == mm->imageGrid) {
      MOERT_ASSIGN_OR_RETURN(rule, moert::computeGridInputs(*mm, tensor));
    }
  std::error_code error;
  std::filesystem::create_directories(args.saveVisionInputs, error);
  if (error)
    return absl::InvalidArgumentError(absl::StrCat(
        "--save-vision-inputs ", args.saveVisionInputs, ": ", error.message()));
  moert::VisionInputs all = vision;
  for (const moert::NamedTensor &t : rule)
    all.emplace_back(t.name, t.view());
  for (const auto &[name, t] : all)
    MOERT_RETURN_IF_ERROR(moert::npy::write(
        (std::filesystem::path(args.saveVisionInputs) / (name + ".npy"))
            .string(),
        t.dtype, t.shape, t.data, t.bytes));
  return absl::OkStatus();
}

std::string GenerateArgs::verify() const {
  if (!active && (!flags.empty() || stream))
    return (flags.empty() ? std::string("--stream") : flags.front()) +
           " generates tokens; it needs --prompt-ids, --prompt-tokens or "
           "--prompts";
  int prompts = !promptIds.empty() + !promptsFile.empty() + (promptTokens > 0);
  if (prompts > 1)
    return "--prompt-ids, --prompt-tokens and --prompts each give the "
           "prompt; use one";
  if (!visionInputs.empty() && promptIds.empty())
    return "--vision-input describes the images of one prompt; give it "
           "with --prompt-ids";
  if (!images.empty() && promptIds.empty())
    return "--image gives the images of one prompt; give it with "
           "--prompt-ids";
  return "";
}

bool reports(const moert::Generator &) { return true; }
bool reports(const moert::GroupGenerator &group) { return group.isRoot(); }
moert::Generator &firstGenerator(moert::Generator &generator) {
  return generator;
}
moert::Generator &firstGenerator(moert::GroupGenerator &group) {
  return *group.localGenerators().front();
}
std::string describeDevices(const moert::Generator &) { return ""; }
std::string describeDevices(const moert::GroupGenerator &group) {
  return absl::StrCat(" on ", group.numDevices(), " devices (",
                      moert::mpiRank() >= 0 ? "mpi" : "in-process", ")");
}

absl::StatusOr<std::vector<int64_t>> promptFor(const moert::Plan &plan,
                                               const GenerateArgs &args,
                                               uint64_t seed,
                                               std::string &description) {
  if (args.promptTokens <= 0)
    return args.promptIds;
  const moert::GenerationDesc *gen = plan.generation();
  int64_t vocab = gen ? gen->vocabSize : 0;
  if (vocab <= 0)
    return absl::InvalidArgumentError(
        "--prompt-tokens draws ids from the plan's vocabulary (its logits' "
        "last dim), which this plan does not record; give the prompt with "
        "--prompt-ids");
  // The stream of a forward run's generated inputs (std::mt19937_64 of
  // --seed), so that a seed names one prompt.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(args.promptTokens);
  for (int64_t &id : ids)
    id = dist(rng);
  description = absl::StrCat("prompt: generated ", args.promptTokens,
                             " ids uniform in [0, ", vocab,
                             ") (the vocabulary), seed ", seed);
  return ids;
}

namespace {

/// The decode schedule's MoE layers ("moe_layers", the routing profile
/// `moec compile --routing-profile` reads).
absl::Status appendDevices(std::string &json, const moert::Plan &plan,
                           moert::Generator &generator) {
  appendMoeLayers(
      json, "moe_layers",
      moert::moeLayerStats(plan, generator.decodeSession().stepStats()), 2);
  return absl::OkStatus();
}
/// The decode schedules' MoE layers merged over the devices, and per device
/// the traffic of its collective steps and its experts' rows over the
/// prefill and decode runs. Collective under MPI.
absl::Status appendDevices(std::string &json, const moert::Plan &,
                           moert::GroupGenerator &group) {
  MOERT_ASSIGN_OR_RETURN(std::vector<moert::DeviceStats> devices,
                         group.deviceStats());
  if (!group.isRoot())
    return absl::OkStatus();
  MOERT_RETURN_IF_ERROR(appendMergedLayers(json, devices));
  absl::StrAppend(&json, ",\n  \"devices\": [");
  for (size_t i = 0; i < devices.size(); ++i) {
    absl::StrAppend(&json, i ? "," : "", "\n    ");
    appendDeviceTraffic(json, devices[i]);
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(
      &json, "\n  ],\n  \"expert_parallel\": {\"devices\": ", devices.size(),
      ", \"backend\": \"", moert::mpiRank() >= 0 ? "mpi" : "in-process", "\"}");
  return absl::OkStatus();
}

template <typename GeneratorT>
absl::Status appendDetails(std::string &json, const moert::Plan &plan,
                           GeneratorT &generator, FILE *log) {
  moert::Generator &local = firstGenerator(generator);
  const moert::GenerationDesc &gen = *plan.generation();
  // Device 0's steps (this rank's under MPI, which only rank 0 writes). A
  // multimodal plan's prompt runs through its Prefill stage.
  bool prefill = gen.hasPrefill || plan.multimodal();
  appendSteps(json, "decode_steps_stats", local.decodeSession().stepStats());
  if (prefill)
    appendSteps(json, "prefill_steps_stats",
                local.prefillSession().stepStats());
  MOERT_RETURN_IF_ERROR(appendDevices(json, plan, generator));
  // The prefill and decode sessions share one expert cache (device 0's).
  appendProcessMemory(json, plan);
  std::vector<CachePhase> phases;
  if (prefill)
    phases.push_back({"prefill ", local.prefillSession().stepStats(), true});
  phases.push_back({"decode ", local.decodeSession().stepStats()});
  return reportExpertCache(json, plan, local.decodeSession(), phases, log);
}

} // namespace

absl::Status appendGenerationDetails(std::string &json, const moert::Plan &plan,
                                     moert::Generator &generator, FILE *log) {
  return appendDetails(json, plan, generator, log);
}
absl::Status appendGenerationDetails(std::string &json, const moert::Plan &plan,
                                     moert::GroupGenerator &group, FILE *log) {
  return appendDetails(json, plan, group, log);
}

namespace {

template <typename GeneratorT>
absl::Status generateWith(GeneratorT &generator, const moert::Plan &plan,
                          const GenerateArgs &args, uint64_t seed,
                          const std::string &outputDir,
                          const std::string &planPath,
                          const std::string &statsPath, Recording &recording) {
  std::string drawn;
  MOERT_ASSIGN_OR_RETURN(std::vector<int64_t> prompt,
                         promptFor(plan, args, seed, drawn));
  std::vector<std::vector<int64_t>> prompts = {prompt};
  bool fromFile = !args.promptsFile.empty();
  if (fromFile) {
    MOERT_ASSIGN_OR_RETURN(prompts, readPromptsFile(args.promptsFile));
  }
  bool root = reports(generator);
  if (root && !drawn.empty())
    std::fprintf(stderr, "moe-run: %s\n", drawn.c_str());
  attachRecording(recording, generator);
  int64_t vocab = generator.vocabSize();
  std::vector<moert::npy::Array> arrays;
  moert::VisionInputs vision;
  MOERT_RETURN_IF_ERROR(readVisionInputs(plan, args, arrays, vision));
  // The exported graphs have a batch of one: the prompts run one after
  // another, each from a clear cache with its own positions, stop ids and
  // sampler (seeded with --seed, so a prompt's tokens do not depend on the
  // prompts before it).
  std::vector<PromptResult> results;
  for (size_t p = 0; p < prompts.size(); ++p) {
    moert::GenerateOptions options = args.options;
    options.sampling.seed = seed;
    // The model's end-of-sequence ids stop it, as in onnxruntime-genai.
    if (!args.ignoreEos)
      if (const moert::GenerationDesc *gen = plan.generation())
        options.stopIds.insert(options.stopIds.end(), gen->eosIds.begin(),
                               gen->eosIds.end());
    PromptResult result;
    bool first = true;
    auto onToken = [&](int64_t token) {
      const std::vector<float> &row = generator.logits();
      result.logits.insert(result.logits.end(), row.begin(), row.end());
      if (args.stream && root) {
        std::printf(first ? "%lld" : " %lld", static_cast<long long>(token));
        std::fflush(stdout);
      }
      first = false;
    };
    absl::StatusOr<std::vector<int64_t>> tokens =
        generator.generate(prompts[p], vision, options, onToken);
    if (!tokens.ok() && fromFile)
      return absl::Status(tokens.status().code(),
                          absl::StrCat(args.promptsFile, ": prompt ", p + 1,
                                       ": ", tokens.status().message()));
    MOERT_RETURN_IF_ERROR(tokens.status());
    result.tokens = std::move(*tokens);
    result.times = generator.times();
    recording.addGeneration(result.times);
    if (root) {
      if (!args.stream)
        for (size_t i = 0; i < result.tokens.size(); ++i)
          std::printf(i ? " %lld" : "%lld",
                      static_cast<long long>(result.tokens[i]));
      std::printf("\n");
      std::fflush(stdout);
    }
    results.push_back(std::move(result));
  }

  moert::GenerationTimes total;
  double firstTokenSum = 0;
  for (const PromptResult &r : results) {
    total.promptTokens += r.times.promptTokens;
    total.newTokens += r.times.newTokens;
    total.prefillSeconds += r.times.prefillSeconds;
    total.visionSeconds += r.times.visionSeconds;
    total.decodeSteps += r.times.decodeSteps;
    total.decodeSeconds += r.times.decodeSeconds;
    firstTokenSum += r.times.firstTokenSeconds;
  }
  double firstToken = firstTokenSum / results.size();
  double prefillRate =
      total.prefillSeconds > 0 ? total.promptTokens / total.prefillSeconds : 0;
  double decodeRate =
      total.decodeSeconds > 0 ? total.decodeSteps / total.decodeSeconds : 0;
  std::string prompted =
      fromFile ? absl::StrCat(results.size(), " prompt",
                              results.size() == 1 ? "" : "s", ", ")
               : "";
  std::string devices = describeDevices(generator);
  if (root)
    std::fprintf(stderr,
                 "moe-run: %s%lld new tokens%s; time to first token %.3f "
                 "ms%s; prefill %lld tokens at %.1f tokens/s%s; decode %lld "
                 "tokens at %.1f tokens/s; KV cache %llu bytes%s, %d of "
                 "%d caches written in place\n",
                 prompted.c_str(), static_cast<long long>(total.newTokens),
                 devices.c_str(), firstToken * 1e3, fromFile ? " (mean)" : "",
                 static_cast<long long>(total.promptTokens), prefillRate,
                 total.visionSeconds > 0
                     ? absl::StrFormat(" (vision encode %.3f ms)",
                                       total.visionSeconds * 1e3)
                           .c_str()
                     : "",
                 static_cast<long long>(total.decodeSteps), decodeRate,
                 static_cast<unsigned long long>(generator.cacheBytes()),
                 devices.empty() ? "" : " per device",
                 firstGenerator(generator).cachesInPlace(),
                 firstGenerator(generator).numCaches());

  if (!outputDir.empty() && root) {
    std::error_code ec;
    std::filesystem::create_directories(outputDir, ec);
    if (ec)
      return absl::NotFoundError(
          absl::StrCat(outputDir, ": cannot create directory: ", ec.message()));
    std::filesystem::path dir(outputDir);
    // One prompt: the new ids [n] and logits [n, vocab]. A prompts file:
    // [prompts, longest] and [prompts, longest, vocab], a sequence that
    // stopped early padded with id -1 and logits 0.
    int64_t longest = 0;
    for (const PromptResult &r : results)
      longest = std::max<int64_t>(longest, r.tokens.size());
    std::vector<int64_t> ids(results.size() * longest, -1);
    std::vector<float> logits(ids.size() * vocab, 0.0f);
    for (size_t p = 0; p < results.size(); ++p) {
      std::copy(results[p].tokens.begin(), results[p].tokens.end(),
                ids.begin() + p * longest);
      std::copy(results[p].logits.begin(), results[p].logits.end(),
                logits.begin() + p * longest * vocab);
    }
    std::vector<int64_t> idShape = {longest};
    if (fromFile)
      idShape.insert(idShape.begin(), static_cast<int64_t>(results.size()));
    std::vector<int64_t> logitShape = idShape;
    logitShape.push_back(vocab);
    MOERT_RETURN_IF_ERROR(
        moert::npy::write((dir / "tokens.npy").string(), moert::DType::I64,
                          idShape, ids.data(), ids.size() * sizeof(int64_t)));
    MOERT_RETURN_IF_ERROR(moert::npy::write(
        (dir / "logits.npy").string(), moert::DType::F32, logitShape,
        logits.data(), logits.size() * sizeof(float)));
    // A drawn prompt is written too: the ids the new tokens follow.
    if (!drawn.empty())
      MOERT_RETURN_IF_ERROR(moert::npy::write(
          (dir / "prompt_ids.npy").string(), moert::DType::I64,
          {static_cast<int64_t>(prompt.size())}, prompt.data(),
          prompt.size() * sizeof(int64_t)));
  }
  recording.config().promptTokens = total.promptTokens;
  recording.config().newTokens = total.newTokens;
  MOERT_RETURN_IF_ERROR(finishRecording(recording, plan, generator));
  if (statsPath.empty())
    return absl::OkStatus();
  moert::Generator &local = firstGenerator(generator);
  const moert::GenerationDesc &gen = *plan.generation();
  std::string json = absl::StrCat(
      "{\n  \"plan\": ", jsonString(planPath),
      ",\n  \"threads\": ", local.decodeSession().threads(),
      ",\n  \"prompts\": ", results.size(),
      ",\n  \"prompt_tokens\": ", total.promptTokens,
      ",\n  \"new_tokens\": ", total.newTokens,
      ",\n  \"decode_steps\": ", total.decodeSteps,
      ",\n  \"time_to_first_token_ms\": ",
      absl::StrFormat("%.6f", firstToken * 1e3), ",\n  \"prefill_ms\": ",
      absl::StrFormat("%.6f", total.prefillSeconds * 1e3),
      ",\n  \"decode_ms\": ",
      absl::StrFormat("%.6f", total.decodeSeconds * 1e3),
      ",\n  \"prefill_tokens_per_s\": ", absl::StrFormat("%.3f", prefillRate),
      ",\n  \"decode_tokens_per_s\": ", absl::StrFormat("%.3f", decodeRate),
      plan.multimodal() ? absl::StrFormat(",\n  \"vision_encode_ms\": %.6f",
                                          total.visionSeconds * 1e3)
                        : std::string(),
      ",\n  \"max_seq\": ", gen.maxSeq,
      ",\n  \"kv_cache_bytes\": ", generator.cacheBytes(),
      ",\n  \"kv_caches\": ", local.numCaches(),
      ",\n  \"kv_caches_in_place\": ", local.cachesInPlace(),
      ",\n  \"kv_cache_bytes_at_max_seq\": ", gen.cacheBytes);
  if (fromFile) {
    absl::StrAppend(&json, ",\n  \"per_prompt\": [");
    for (size_t p = 0; p < results.size(); ++p) {
      const moert::GenerationTimes &t = results[p].times;
      absl::StrAppendFormat(
          &json,
          "%s\n    {\"prompt_tokens\": %d, \"new_tokens\": %d, "
          "\"time_to_first_token_ms\": %.6f, \"prefill_ms\": %.6f, "
          "\"decode_ms\": %.6f}",
          p ? "," : "", t.promptTokens, t.newTokens, t.firstTokenSeconds * 1e3,
          t.prefillSeconds * 1e3, t.decodeSeconds * 1e3);
    }
    absl::StrAppend(&json, "\n  ]");
  }
  MOERT_RETURN_IF_ERROR(appendGenerationDetails(json, plan, generator, stderr));
  absl::StrAppend(&json, "\n}\n");
  if (!root)
    return absl::OkStatus();
  return moert::writeFile(statsPath, json.data(), json.size());
}

} // namespace

absl::Status runGeneration(const moert::Plan &plan, const GenerateArgs &args,
                           const GenerationRun &run, Recording &recording) {
  if (run.group) {
    moert::GroupGeneratorOptions options;
    options.threadsPerDevice = run.threads;
    options.kvCacheInPlace = args.kvCacheInPlace;
    options.comm.timeoutSeconds = run.commTimeout;
    options.deviceMemory = run.deviceMemory;
    options.expertRead = run.expertRead;
    options.expertPrefetch = run.expertPrefetch;
    options.expertCache = run.expertCache;
    std::unique_ptr<moert::GroupGenerator> group;
    if (run.mpi) {
      MOERT_ASSIGN_OR_RETURN(group,
                             moert::GroupGenerator::createMpi(plan, options));
    } else {
      MOERT_ASSIGN_OR_RETURN(group,
                             moert::GroupGenerator::create(plan, options));
    }
    if (run.bench > 0)
      return benchGeneration(*group, plan, args, run, recording);
    return generateWith(*group, plan, args, run.seed, run.outputDir,
                        run.planPath, run.statsPath, recording);
  }
  moert::SessionOptions sessionOptions;
  sessionOptions.threads = run.threads;
  sessionOptions.kvCacheInPlace = args.kvCacheInPlace;
  sessionOptions.deviceMemory = run.deviceMemory;
  sessionOptions.expertRead = run.expertRead;
  sessionOptions.expertPrefetch = run.expertPrefetch;
  sessionOptions.expertCache = run.expertCache;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Generator> generator,
                         moert::Generator::create(plan, sessionOptions));
  if (run.bench > 0)
    return benchGeneration(*generator, plan, args, run, recording);
  return generateWith(*generator, plan, args, run.seed, run.outputDir,
                      run.planPath, run.statsPath, recording);
}

} // namespace moe_run
