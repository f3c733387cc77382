//===- options.cpp - moe-run's command line ------------------------------===//

#include "options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace moe_run {

const char *const kUsage = R"(usage: moe-run PLAN [options]

Runs a plan written by `moec compile` on the CPU or on GPUs (--backend cuda).

options:
  --input NAME=FILE.npy  value of graph input NAME (repeatable); inputs not
                         given are generated from --seed (one line each on
                         stderr: shape, dtype, range, seed)
  --output-dir DIR       write each output NAME as DIR/NAME.npy (without
                         it, nothing is written)
  --save-inputs DIR      write each input (given or generated) as
                         DIR/NAME.npy
  --threads N            worker threads (default: all cores)
  --tokens N             tokens of the generated inputs: the size of their
                         token axis (the seq of [batch, seq], or the only
                         symbolic dim; default: 16, within its range);
                         other symbolic dims take 1, or the size the plan
                         fixes
  --dim SYMBOL=N         size of one symbolic dim of generated inputs
                         (over --tokens)
  --seed N               seed of generated inputs (default: 0)
  --bench N              time N runs after the warm-up: mean, stddev,
                         p50/p90/p99, min, max, runs/s and tokens/s
  --duration SECONDS     time runs until SECONDS have passed (with --bench
                         N: and at least N runs)
  --warmup N             warm-up runs before the timed ones (default: 1
                         with --bench or --duration, else 0: one cold run)
  --fresh-inputs         with --bench or --duration: draw the generated
                         inputs anew (seed + run) before every run,
                         untimed, so that each run routes its own tokens
                         (tiered plans' caches)
  --stats FILE.json      write the timing and per-step times (of the timed
                         runs) as JSON, with each MoE layer's tokens per
                         expert
  --trace FILE.json      write the timed runs (the last 100) as a Chrome
                         trace-event file for Perfetto / chrome://tracing
  --report-html FILE     write a self-contained HTML page: expert-load
                         heatmaps, step-time breakdown, imbalance, config
  --compare MODEL.onnx   check the plan against onnxruntime on MODEL.onnx
                         (runs `moec-verify MODEL.onnx --plan PLAN`, with
                         --input, --tokens, --dim, --seed, --save-inputs
                         and --threads)
  --backend cpu|cuda     where the plan runs (default: cpu); cuda runs a plan
                         from `moec compile --target cuda` on GPU 0, or each
                         device d of a multi-device plan on GPU d modulo the
                         visible GPUs (under mpirun: the rank's local GPU)
  --cuda-graphs on|off   replay runs as CUDA graphs when every step of a
                         schedule runs on the GPU (default: on)
  --placement            with --backend cuda: print where each step would
                         run (GPU or host) and whether runs replay CUDA
                         graphs, then exit; needs no GPU
  --devices N            run the N device schedules of a multi-device plan
                         (`moec compile --devices N`) as N threads of this
                         process; under `mpirun -np N`, each rank runs one
  --comm host|nccl       how the devices exchange rows (default: host):
                         through the host (in-process or MPI), or with
                         NCCL between the GPUs (needs --backend cuda, a
                         multi-device run and one GPU per device)
  --comm-timeout SECONDS how long a device waits for the others in an
                         exchange before failing (default: 60)
  --weight-pages MODE    how the plan is held: mapped (the file in 4 KiB
                         pages, shared with other processes), huge (copied
                         into 2 MiB pages: fewer TLB misses, faster
                         decode), or auto (default: huge for a plan of
                         64 MiB or more that fits in half the memory the
                         process may use, mapped under mpirun)
  --device-memory BYTES  a tiered plan (moec compile --device-memory): the
                         memory budget (512M, 4G, ...) that replaces the
                         plan's tiers when the session starts
  --expert-read MODE     how a tiered plan's cold experts are read: pread,
                         direct (O_DIRECT), mmap, or auto (default: direct
                         when the cold experts and the budget do not fit
                         in the memory the process may use, its cgroup's
                         limit included; else pread)
  --prefetch MODE        a tiered plan: none, next-layer (while a layer
                         computes, read the experts the next layer's
                         router picks for its tokens) or next-micro-batch
                         (while a micro-batch of an expert-parallel layer
                         computes, read the experts the next micro-batch
                         routes to); default: the plan's (moec compile
                         --prefetch), else none
  --expert-cache POLICY  a tiered plan on the cpu: static (default: the
                         plan's hot experts pinned), lru[:F], lfu[:F] or
                         adaptive[:F] (a share F of them pinned, default 0;
                         the rest of the budget a cache of the least
                         recently used, or least used by a decaying count,
                         experts, or adaptive: evicting as whichever of
                         those two, or a slowly decaying count, has hit
                         most lately)
  --help                 print this help
  --version              print the version, the git commit and the plan
                         formats this runtime reads

generation (plans from `moec compile DECODE.onnx --prefill PREFILL.onnx
--max-seq S`):
  --prompt-ids 3,14,15   the prompt's token ids; generates new tokens, prints
                         their ids on stdout and a summary on stderr, and
                         with --output-dir writes DIR/tokens.npy (int64, the
                         new ids) and DIR/logits.npy (each one's logits)
  --vision-input NAME=FILE.npy
                         a multimodal plan's vision input (the vision
                         graph's input NAME, or the image grid, as the
                         model's processor gives it; docs/multimodal.md),
                         for the images of the --prompt-ids
  --image PATH           a PNG or JPEG image for the --prompt-ids of a
                         multimodal plan compiled with the model's
                         preprocessor_config.json (repeat for several, in
                         the prompt's order): its pixel patches and grid
  --save-vision-inputs DIR
                         write every vision input of the prompt (given,
                         from --image, and those the plan computes from the
                         grid) as DIR/NAME.npy
  --prompt-tokens P      a prompt of P ids drawn from --seed, uniform over
                         the vocabulary (the plan's logits' last dim);
                         --output-dir adds DIR/prompt_ids.npy
  --prompts FILE         several prompts, one line of ids each (commas or
                         spaces), generated one after another (the exported
                         graphs have a batch of one): one line of new ids
                         per prompt; tokens.npy is [prompts, longest], -1
                         after a sequence that stopped early
  --max-new-tokens N     new tokens to generate (default: 16)
  --temperature T        0 (default): greedy; above 0: sample (seeded by
                         --seed)
  --top-k K              with --temperature: sample among the K most
                         likely ids (0: all)
  --top-p P              with --temperature: sample among the fewest most
                         likely ids whose probability reaches P (default:
                         1, all)
  --stop-id ID           stop after generating ID (repeatable); a plan
                         that records its model's end-of-sequence ids (moec
                         compile MODEL_DIR) stops after one of those too
  --ignore-eos           do not stop at the plan's end-of-sequence ids
  --kv-cache MODE        in-place (default): a decode step appends to each
                         cache where it lies, where the plan allows it (the
                         cache read only by fused attention); copy: the
                         exported Concat copies the past every step
  --stream               print each id as soon as it is generated
  --bench N              a generation benchmark (llama-bench's table): N
                         timed repetitions of one prompt (--prompt-ids or
                         --prompt-tokens) and --max-new-tokens (at least 2)
                         after --warmup repetitions (default: 1); prints
                         the prefill (pp P) and decode (tg G) tokens/s,
                         mean +/- stddev, and the time to first token and
                         inter-token latency, p50 and p99 (also in --stats)
  Forward-run flags (--input, --tokens, --dim, --fresh-inputs,
  --save-inputs, --duration, --backend, --comm, --placement, --compare) are
  usage errors with a prompt, as are --warmup without --bench, --top-k and
  --top-p without --temperature, and --prompts, --stream, --stop-id and
  --output-dir with --bench.
  An expert-parallel generation plan (moec compile ... --devices N) runs
  with --devices N or under mpirun -np N: device 0 draws each token.

text (runs `moe-serve generate`: Python, tokenizers and jinja2; see
docs/serving.md):
  --tokenizer PATH       tokenizer.json, or a folder with it and
                         tokenizer_config.json (chat template, eos token)
  --prompt TEXT          the prompt as text; the new text streams to stdout
  --chat                 the prompt is a user message, through the chat
                         template
  --system TEXT          with --chat: a system message before it
  --stop TEXT            stop before TEXT (repeatable)
  With --prompt: --max-new-tokens (default: what fits in max_seq),
  --temperature, --top-k, --top-p, --seed, --ignore-eos, --threads and
  --devices apply; other flags are usage errors.
)";

namespace {

/// Every option moe-run takes, for the suggestion of a misspelt one.
constexpr const char *kOptions[] = {
    "--input",
    "--output-dir",
    "--save-inputs",
    "--threads",
    "--tokens",
    "--dim",
    "--seed",
    "--bench",
    "--duration",
    "--warmup",
    "--fresh-inputs",
    "--stats",
    "--trace",
    "--report-html",
    "--compare",
    "--backend",
    "--cuda-graphs",
    "--placement",
    "--devices",
    "--comm",
    "--comm-timeout",
    "--device-memory",
    "--weight-pages",
    "--expert-read",
    "--prefetch",
    "--help",
    "--version",
    "--prompt",
    "--prompt-ids",
    "--prompt-tokens",
    "--prompts",
    "--max-new-tokens",
    "--temperature",
    "--top-k",
    "--top-p",
    "--stop-id",
    "--kv-cache",
    "--stream",
    "--ignore-eos",
    "--tokenizer",
    "--chat",
    "--system",
    "--stop",
    "--vision-input",
    "--expert-cache",
    "--image",
    "--save-vision-inputs",
};

/// The Levenshtein distance of `a` and `b` with replacements, as
/// llvm::StringRef::edit_distance computes it.
size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

} // namespace

std::string nearestOption(const std::string &name) {
  // "-bench" and "bench" mean "--bench" too.
  std::string body =
      name.substr(std::min(name.find_first_not_of('-'), name.size()));
  std::string best;
  size_t bestDistance = 0;
  for (const char *option : kOptions) {
    size_t distance = editDistance(body, std::string(option + 2));
    if (best.empty() || distance < bestDistance) {
      best = option;
      bestDistance = distance;
    }
  }
  // LLVM's command line suggests the nearest option however far; past a
  // third of the name's letters (at least 2) it is rarely what was meant.
  size_t limit = std::max<size_t>(2, body.size() / 3);
  return !body.empty() && bestDistance <= limit ? best : "";
}

namespace {

/// Parses option `name` (with its `value`) into `options`; returns the usage
/// error, or "".
std::string parseOption(const std::string &name, const std::string &value,
                        Options &options) {
  auto integer = [](const std::string &text, int64_t min, int64_t &out) {
    return absl::SimpleAtoi(text, &out) && out >= min;
  };
  int64_t number = 0;
  if (std::optional<std::string> problem =
          parseGenerateOption(name, value, options.generate)) {
    if (!problem->empty())
      return *problem;
  } else if (name == "--input" || name == "--dim") {
    size_t sep = value.find('=');
    if (sep == std::string::npos || sep == 0)
      return absl::StrCat(name, " expects NAME=VALUE, got '", value, "'");
    std::string key = value.substr(0, sep), rest = value.substr(sep + 1);
    if (name == "--input") {
      options.inputs.given.emplace_back(key, rest);
    } else {
      if (!integer(rest, 0, number))
        return absl::StrCat("--dim ", key, " needs a non-negative integer");
      options.inputs.dims[key] = number;
    }
  } else if (name == "--tokenizer") {
    if (value.empty())
      return "--tokenizer needs a tokenizer.json or its folder";
    options.text.tokenizer = value;
  } else if (name == "--prompt") {
    options.text.prompt = value;
    options.text.promptGiven = true;
  } else if (name == "--system") {
    options.text.system = value;
  } else if (name == "--stop") {
    if (value.empty())
      return "--stop needs a non-empty string";
    options.text.stops.push_back(value);
  } else if (name == "--output-dir") {
    options.outputs.outputDir = value;
  } else if (name == "--save-inputs") {
    options.outputs.saveInputs = value;
  } else if (name == "--compare") {
    options.compare = value;
  } else if (name == "--duration") {
    double seconds = 0;
    if (!absl::SimpleAtod(value, &seconds) || !(seconds > 0) || seconds > 86400)
      return "--duration needs a number of seconds in (0, 86400]";
    options.timing.duration = seconds;
  } else if (name == "--threads") {
    if (!integer(value, 1, number) || number > 1024)
      return "--threads needs an integer in [1, 1024]";
    options.device.threads = static_cast<int>(number);
  } else if (name == "--tokens") {
    if (!integer(value, 0, number))
      return "--tokens needs a non-negative integer";
    options.inputs.tokens = number;
  } else if (name == "--seed") {
    if (!integer(value, 0, number))
      return "--seed needs a non-negative integer";
    options.inputs.seed = static_cast<uint64_t>(number);
  } else if (name == "--bench") {
    if (!integer(value, 1, number) || number > 1000000)
      return "--bench needs a positive integer";
    options.timing.bench = static_cast<int>(number);
  } else if (name == "--warmup") {
    if (!integer(value, 0, number) || number > 1000000)
      return "--warmup needs a non-negative integer";
    options.timing.warmup = static_cast<int>(number);
  } else if (name == "--stats") {
    options.outputs.stats = value;
  } else if (name == "--trace") {
    options.outputs.trace = value;
  } else if (name == "--report-html") {
    options.outputs.reportHtml = value;
  } else if (name == "--devices") {
    if (!integer(value, 1, number) || number > 4096)
      return "--devices needs an integer in [1, 4096]";
    options.device.devices = static_cast<int>(number);
  } else if (name == "--comm-timeout") {
    double seconds = 0;
    if (!absl::SimpleAtod(value, &seconds) || !(seconds > 0) || seconds > 1e6)
      return "--comm-timeout needs a number of seconds in (0, 1e6]";
    options.device.commTimeout = seconds;
  } else if (name == "--comm") {
    absl::StatusOr<moert::CommKind> kind = moert::parseCommKind(value);
    if (!kind.ok())
      return std::string(kind.status().message());
    options.device.comm = *kind;
  } else if (name == "--cuda-graphs") {
    if (value != "on" && value != "off")
      return absl::StrCat("--cuda-graphs must be on or off, not '", value, "'");
    options.device.cudaGraphs = value == "on";
  } else if (name == "--device-memory") {
    if (!moert::parseByteSize(value.c_str(), options.tiers.deviceMemory))
      return absl::StrCat("--device-memory needs a positive byte count such "
                          "as 536870912, 512M or 4G, not '",
                          value, "'");
  } else if (name == "--weight-pages") {
    using Pages = moert::LoadOptions::WeightPages;
    if (value != "auto" && value != "mapped" && value != "huge")
      return absl::StrCat("--weight-pages must be auto, mapped or huge, not '",
                          value, "'");
    options.device.weightPages = value == "huge"     ? Pages::Huge
                                 : value == "mapped" ? Pages::Mapped
                                                     : Pages::Auto;
  } else if (name == "--expert-read") {
    if (value != "pread" && value != "direct" && value != "mmap" &&
        value != "auto")
      return absl::StrCat(
          "--expert-read must be pread, direct, mmap or auto, not '", value,
          "'");
    options.tiers.expertRead = value;
  } else if (name == "--prefetch") {
    if (value != "none" && value != "next-layer" && value != "next-micro-batch")
      return absl::StrCat(
          "--prefetch must be none, next-layer or next-micro-batch, not '",
          value, "'");
    options.tiers.prefetch = value;
  } else if (name == "--expert-cache") {
    std::string kind = value.substr(0, value.find(':'));
    std::string fraction =
        kind.size() < value.size() ? value.substr(kind.size() + 1) : "0";
    char *end = nullptr;
    double f = std::strtod(fraction.c_str(), &end);
    bool ok = value == "static" ||
              ((kind == "lru" || kind == "lfu" || kind == "adaptive") &&
               !fraction.empty() && end && !*end && f >= 0 && f <= 1);
    if (!ok)
      return absl::StrCat("--expert-cache must be static, lru[:F], lfu[:F] "
                          "or adaptive[:F] with F from 0 to 1, not '",
                          value, "'");
    options.tiers.cache = value;
  } else if (name == "--backend") {
    if (value != "cpu" && value != "cuda")
      return absl::StrCat("--backend must be cpu or cuda, not '", value, "'");
    options.device.backend = value;
  } else {
    std::string nearest = nearestOption(name);
    return absl::StrCat("unknown option '", name, "'",
                        nearest.empty()
                            ? ""
                            : absl::StrCat(" (did you mean '", nearest, "'?)"));
  }
  return "";
}

/// The usage error of a flag that does not apply to a generation (a
/// prompt), or with --bench to its benchmark; "" when they all do.
std::string verifyGeneration(const Options &options) {
  const GenerateArgs &gen = options.generate;
  auto given = [&](const char *flag) {
    return std::find(gen.flags.begin(), gen.flags.end(), flag) !=
           gen.flags.end();
  };
  const char *prompt = "the prompt is --prompt-ids, --prompt-tokens or "
                       "--prompts";
  if (!options.inputs.given.empty())
    return absl::StrCat("--input gives a forward run's inputs; it does not "
                        "apply to generation (",
                        prompt, ")");
  if (options.inputs.tokens >= 0)
    return "--tokens sizes a forward run's generated inputs; it does not "
           "apply to generation (--prompt-tokens P draws a prompt of P "
           "ids)";
  if (!options.inputs.dims.empty())
    return "--dim sizes a forward run's generated inputs; it does not "
           "apply to generation (--prompt-tokens P draws a prompt of P "
           "ids)";
  if (options.timing.freshInputs)
    return "--fresh-inputs draws a forward run's inputs anew before each "
           "run; it does not apply to generation";
  if (!options.outputs.saveInputs.empty())
    return "--save-inputs writes a forward run's inputs; it does not apply "
           "to generation (--output-dir writes the new ids and logits)";
  if (options.timing.duration > 0)
    return "--duration times forward runs; a generation benchmark repeats "
           "--bench N times";
  if (options.device.backend != "cpu")
    return "--backend cuda runs forward passes; generation runs on the cpu "
           "backend";
  if (options.device.comm != moert::CommKind::Host)
    return "--comm nccl exchanges between GPUs; generation runs on the cpu "
           "backend";
  if (options.device.placement)
    return "--placement shows the CUDA backend's choices for a forward run; "
           "it does not apply to generation";
  if (!options.compare.empty())
    return "--compare checks a forward run against onnxruntime; it does "
           "not apply to generation";
  if (options.timing.warmup >= 0 && !options.timing.bench)
    return "--warmup repeats the generation before the timed repetitions; "
           "it needs --bench N";
  bool sampling = gen.options.sampling.temperature > 0;
  if (given("--top-k") && !sampling)
    return "--top-k samples among the K most likely ids; it needs "
           "--temperature above 0 (greedy takes the most likely id)";
  if (given("--top-p") && !sampling)
    return "--top-p samples among the most likely ids; it needs "
           "--temperature above 0 (greedy takes the most likely id)";
  if (!options.timing.bench)
    return "";
  if (!gen.promptsFile.empty())
    return "--bench times one prompt, given with --prompt-ids or "
           "--prompt-tokens; --prompts does not apply";
  if (gen.stream)
    return "--stream prints the ids of one generation; --bench prints a "
           "table of its rates instead";
  if (!gen.options.stopIds.empty())
    return "--stop-id ends a generation early; --bench generates "
           "--max-new-tokens in every repetition";
  if (!options.outputs.outputDir.empty())
    return "--output-dir writes one generation's ids and logits; it does "
           "not apply with --bench";
  if (gen.options.maxNewTokens < 2)
    return "--bench needs --max-new-tokens 2 or more: tg times the "
           "decode steps after the first token, which the prefill draws";
  return "";
}

/// The usage error of a text generation (--prompt) missing what it needs
/// or given a flag that does not apply to it; "" when fine.
std::string verifyText(const Options &options) {
  const TextOptions &text = options.text;
  if (!text.promptGiven)
    return "--tokenizer, --chat, --system and --stop are for text "
           "generation; it needs --prompt TEXT";
  if (text.tokenizer.empty())
    return "--prompt TEXT needs --tokenizer PATH (a tokenizer.json or its "
           "folder); --prompt-ids gives token ids";
  if (!text.system.empty() && !text.chat)
    return "--system is a chat's system message; it needs --chat";
  const GenerateArgs &gen = options.generate;
  if (gen.active)
    return "--prompt and --prompt-ids, --prompt-tokens or --prompts each "
           "give the prompt; use one";
  for (const std::string &flag : gen.flags)
    if (flag != "--max-new-tokens" && flag != "--temperature" &&
        flag != "--top-k" && flag != "--top-p" && flag != "--ignore-eos")
      return absl::StrCat(flag, " does not apply to text generation "
                                "(--prompt; --stop TEXT ends it at a string)");
  const OutputOptions &out = options.outputs;
  const char *other = nullptr;
  if (!options.inputs.given.empty() || options.inputs.tokens >= 0 ||
      !options.inputs.dims.empty())
    other = "--input, --tokens and --dim";
  else if (options.timing.timed() || options.timing.warmup >= 0 ||
           options.timing.freshInputs)
    other = "--bench, --duration, --warmup and --fresh-inputs";
  else if (!out.outputDir.empty() || !out.saveInputs.empty() ||
           !out.stats.empty() || !out.trace.empty() || !out.reportHtml.empty())
    other = "--output-dir, --save-inputs, --stats, --trace and "
            "--report-html";
  else if (options.device.backend != "cpu" || options.device.placement ||
           options.device.comm != moert::CommKind::Host)
    other = "--backend, --placement and --comm";
  else if (!options.compare.empty())
    other = "--compare";
  if (other)
    return absl::StrCat(other, " do not apply to text generation (--prompt)");
  return "";
}

/// Whether any flag other than --compare's own was given.
bool anyBesidesCompare(const Options &options) {
  const OutputOptions &out = options.outputs;
  return options.timing.timed() || options.device.devices ||
         options.device.backend != "cpu" || options.device.placement ||
         !out.stats.empty() || !out.outputDir.empty() ||
         options.timing.freshInputs || options.timing.warmup >= 0 ||
         !out.trace.empty() || !out.reportHtml.empty();
}

} // namespace

std::string TimingOptions::verify() const {
  if (freshInputs && !timed())
    return "--fresh-inputs draws the generated inputs anew before each "
           "timed run; it needs --bench or --duration";
  return "";
}

std::string DeviceOptions::verify() const {
  if (comm == moert::CommKind::Nccl && backend != "cuda")
    return "--comm nccl exchanges between GPUs; it needs --backend cuda";
  if (placement && backend != "cuda")
    return "--placement shows the CUDA backend's choices; it needs "
           "--backend cuda";
  return "";
}

std::string TierOptions::verify(const DeviceOptions &device) const {
  if (device.backend != "cpu" && expertRead != "auto" && expertRead != "pread")
    return "--expert-read applies to cpu runs (--backend cuda keeps cold "
           "experts in pinned host memory)";
  if (device.backend != "cpu" && prefetch == "next-micro-batch")
    return "--prefetch next-micro-batch applies to cpu runs (--backend cuda "
           "reads ahead with next-layer)";
  if (device.backend != "cpu" && cache != "static")
    return "--expert-cache applies to cpu runs (--backend cuda pins the "
           "plan's hot experts)";
  return "";
}

std::string Options::verify() const {
  if (text.active())
    return verifyText(*this);
  // The mode first: a flag of another mode is named as such, before any
  // concern's own check.
  if (std::string problem = generate.verify(); !problem.empty())
    return problem;
  std::string problem =
      generate.active ? verifyGeneration(*this) : timing.verify();
  if (!problem.empty())
    return problem;
  if (!compare.empty() && anyBesidesCompare(*this))
    return "--compare checks the plan's outputs on the cpu backend; it "
           "takes --input, --tokens, --dim, --seed, --save-inputs and "
           "--threads only";
  if (problem = device.verify(); !problem.empty())
    return problem;
  return tiers.verify(device);
}

std::string parseArgs(int argc, char **argv, Options &options) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      return "help";
    if (arg == "--version")
      return "version";
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-' &&
        !std::isdigit(static_cast<unsigned char>(arg[1]))) {
      // "-bench": one dash, which moe-run's options never have.
      std::string nearest = nearestOption(arg);
      return absl::StrCat(
          "unknown option '", arg, "'",
          nearest.empty() ? ""
                          : absl::StrCat(" (did you mean '", nearest, "'?)"));
    }
    if (arg.size() < 2 || arg.substr(0, 2) != "--") {
      if (!options.plan.empty())
        return absl::StrCat("unexpected argument '", arg, "'");
      options.plan = arg;
      continue;
    }
    if (arg == "--placement") { // The flags without a value.
      options.device.placement = true;
      continue;
    }
    if (arg == "--stream") {
      options.generate.stream = true;
      continue;
    }
    if (arg == "--chat") {
      options.text.chat = true;
      continue;
    }
    if (arg == "--ignore-eos") {
      options.generate.ignoreEos = true;
      options.generate.flags.push_back("--ignore-eos");
      continue;
    }
    if (arg == "--fresh-inputs") {
      options.timing.freshInputs = true;
      continue;
    }
    std::string name(arg);
    std::string value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= argc) {
        // An unknown option is named as such, not as missing its value.
        Options scratch;
        std::string problem = parseOption(name, "", scratch);
        return problem.rfind("unknown option", 0) == 0
                   ? problem
                   : absl::StrCat(name, " needs a value");
      }
      value = argv[++i];
    }
    if (std::string problem = parseOption(name, value, options);
        !problem.empty())
      return problem;
  }
  if (options.plan.empty())
    return "no plan given";
  return options.verify();
}

std::vector<std::string> textGenerateArgs(const Options &options) {
  const TextOptions &text = options.text;
  const moert::GenerateOptions &gen = options.generate.options;
  std::vector<std::string> args = {"generate",     options.plan, "--tokenizer",
                                   text.tokenizer, "--prompt",   text.prompt};
  if (text.chat)
    args.push_back("--chat");
  if (!text.system.empty())
    args.insert(args.end(), {"--system", text.system});
  for (const std::string &stop : text.stops)
    args.insert(args.end(), {"--stop", stop});
  const std::vector<std::string> &flags = options.generate.flags;
  if (std::find(flags.begin(), flags.end(), "--max-new-tokens") != flags.end())
    args.insert(args.end(),
                {"--max-new-tokens", std::to_string(gen.maxNewTokens)});
  if (gen.sampling.temperature > 0)
    args.insert(args.end(),
                {"--temperature", absl::StrCat(gen.sampling.temperature),
                 "--top-k", std::to_string(gen.sampling.topK), "--top-p",
                 absl::StrCat(gen.sampling.topP)});
  args.insert(args.end(), {"--seed", std::to_string(options.inputs.seed)});
  if (options.generate.ignoreEos)
    args.push_back("--ignore-eos");
  if (options.device.threads)
    args.insert(args.end(),
                {"--threads", std::to_string(options.device.threads)});
  if (options.device.devices)
    args.insert(args.end(),
                {"--devices", std::to_string(options.device.devices)});
  return args;
}

} // namespace moe_run
