//===- Options.cpp - moec's command line ----------------------------------===//
//
// Every llvm::cl option of moec is registered here, and read into the
// per-concern structs of Options.h; the cross-flag checks are the structs'
// verify().
//
//===----------------------------------------------------------------------===//

#include "Options.h"

#include "CommandLine.h"
#include "CompileSummary.h"
#include "compiler/cuda/CudaTarget.h"
#include "format/file_io.h"
#include "format/format.h"
#include "moert/moert.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace moec {

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

static cl::SubCommand checkCommand(
    "check", "Report every (domain, op type, opset) a model uses and whether "
             "moec imports it; exit 1 if any is unsupported");
static cl::SubCommand opsCommand("ops",
                                 "List every ONNX op version moec imports");
static cl::SubCommand compileCommand("compile", "Compile an ONNX model");
static cl::SubCommand inspectCommand(
    "inspect", "Print a plan file: symbols, memory plan, tensors and steps");
// Run by main before the parser (it is moec-verify's command line); declared
// so that `moec --help` lists it.
static cl::SubCommand verifyCommand(
    "verify", "Check a plan against onnxruntime on the same inputs; exit 1 on "
              "a mismatch (moec verify --help)");

cl::OptionCategory &getMoecCategory() {
  static cl::OptionCategory category("moec options");
  return category;
}

static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx>"),
                                      cl::sub(checkCommand),
                                      cl::sub(compileCommand),
                                      cl::cat(getMoecCategory()));
static cl::opt<std::string> planPath(cl::Positional, cl::Required,
                                     cl::desc("<plan.bin>"),
                                     cl::sub(inspectCommand),
                                     cl::cat(getMoecCategory()));
static cl::opt<bool> json("json", cl::desc("Print JSON instead of a table"),
                          cl::sub(checkCommand), cl::sub(opsCommand),
                          cl::sub(inspectCommand), cl::cat(getMoecCategory()));
static cl::opt<std::string> outputPath("o",
                                       cl::desc("Output file (default: -, "
                                                "stdout, for --emit mlir)"),
                                       cl::value_desc("path"), cl::init("-"),
                                       cl::sub(compileCommand),
                                       cl::cat(getMoecCategory()));
static cl::opt<std::string> emitKind(
    "emit",
    cl::desc("What to emit: plan (the plan file moe-run executes), mlir "
             "(the imported, simplified IR) or planned-mlir (the IR after "
             "fusion, shape bounds and memory planning); default: plan"),
    cl::value_desc("plan|mlir|planned-mlir"), cl::init("plan"),
    cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::list<std::string>
    dimBounds("bound",
              cl::desc("Bound of the dynamic input dimensions named NAME "
                       "(ONNX dim_param), e.g. --bound batch=1; others take "
                       "--max-tokens"),
              cl::value_desc("NAME=N"), cl::sub(compileCommand),
              cl::cat(getMoecCategory()));
static cl::list<std::string>
    fixedDims("dim",
              cl::desc("Fix the input dimensions named NAME (ONNX dim_param) "
                       "of a vision-language folder's graphs to N, e.g. a "
                       "vision encoder's feature widths"),
              cl::value_desc("NAME=N"), cl::sub(compileCommand),
              cl::cat(getMoecCategory()));
static cl::opt<std::string>
    reportPath("report",
               cl::desc("Write a JSON compile report (memory plan, op "
                        "counts) to this file"),
               cl::value_desc("FILE.json"), cl::init(""),
               cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::opt<uint64_t>
    maxTokens("max-tokens",
              cl::desc("Upper bound of each dynamic input dimension that "
                       "--bound does not name, which buffers are planned "
                       "for (default: 256)"),
              cl::value_desc("N"), cl::init(256), cl::sub(compileCommand),
              cl::cat(getMoecCategory()));
static cl::opt<bool>
    importOnly("import-only",
               cl::desc("Stop after the import: print the IR exactly as the "
                        "ONNX frontend built it"),
               cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::opt<bool>
    verbose("verbose",
            cl::desc("Print the detected MoE layers (gate and expert "
                     "configuration) as a table on stderr, and every "
                     "detector's reason for a layer left generic"),
            cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::opt<bool>
    quiet("quiet",
          cl::desc("Print no summary line after writing the plan (errors, "
                   "warnings and remarks still print)"),
          cl::sub(compileCommand), cl::cat(getMoecCategory()));
// Test only: shows the progress line off a terminal too.
static cl::opt<bool> testProgress(
    "moe-test-progress",
    cl::desc("Test only: show progress on stderr even when it is no terminal"),
    cl::Hidden, cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::opt<bool>
    emitWeights("emit-weights",
                cl::desc("Print weights in the IR instead of eliding them"),
                cl::sub(compileCommand), cl::cat(getMoecCategory()));

static cl::opt<std::string>
    target("target",
           cl::desc("The backend the plan is for: cpu (default), or cuda "
                    "(generates the plan's CUDA kernels through NVRTC; "
                    "docs/cuda.md)"),
           cl::value_desc("cpu|cuda"), cl::init("cpu"), cl::sub(compileCommand),
           cl::cat(getMoecCategory()));
static cl::opt<std::string>
    cudaArch("cuda-arch",
             cl::desc("GPU architecture of --target cuda's kernels "
                      "(default: sm_90)"),
             cl::value_desc("sm_NN"), cl::init("sm_90"),
             cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::opt<std::string>
    ptxOutput("ptx-output",
              cl::desc("With --target cuda: also write the plan's PTX module "
                       "to this file (e.g. for ptxas)"),
              cl::value_desc("FILE.ptx"), cl::init(""), cl::sub(compileCommand),
              cl::cat(getMoecCategory()));

static cl::opt<int64_t>
    numDevices("devices",
               cl::desc("Expert parallelism: compile one schedule per device, "
                        "experts placed on the devices, dense parts "
                        "data-parallel (docs/expert-parallelism.md; "
                        "default: 1)"),
               cl::value_desc("N"), cl::init(1), cl::sub(compileCommand),
               cl::cat(getMoecCategory()));
static cl::opt<std::string> deviceMemory(
    "device-memory",
    cl::desc("Tier the routed experts' weights for a memory budget per "
             "device (bytes, or with K/M/G/T): resident weights first, "
             "then the hottest experts (by --routing-profile, "
             "else by index); the rest are read from the plan on demand "
             "(docs/tiered-experts.md)"),
    cl::value_desc("BYTES"), cl::init(""), cl::sub(compileCommand),
    cl::cat(getMoecCategory()));
static cl::opt<std::string> tierPrefetch(
    "prefetch",
    cl::desc("With --device-memory: how sessions read cold experts ahead "
             "unless moe-run --prefetch says otherwise: none (default), "
             "next-layer (pre-gating: the next layer's router on this "
             "layer's input) or next-micro-batch (the next micro-batch's "
             "exchanged routing); the cold cache keeps room for a second "
             "layer's experts where the budget allows"),
    cl::value_desc("MODE"), cl::init("none"), cl::sub(compileCommand),
    cl::cat(getMoecCategory()));
static cl::opt<std::string> routingProfile(
    "routing-profile",
    cl::desc("With --devices: place experts by the expected load in this "
             "`moe-run --stats` JSON (moe_layers[i].tokens_per_expert) "
             "instead of by parameter bytes; with --device-memory: keep the "
             "most loaded experts resident"),
    cl::value_desc("FILE.json"), cl::init(""), cl::sub(compileCommand),
    cl::cat(getMoecCategory()));
static cl::opt<int64_t> replicateHot(
    "replicate-hot",
    cl::desc("With --routing-profile: give the K most loaded experts of each "
             "layer a second slot on another device (default: 0)"),
    cl::value_desc("K"), cl::init(0), cl::sub(compileCommand),
    cl::cat(getMoecCategory()));
static cl::opt<int64_t> microBatches(
    "micro-batches",
    cl::desc("With --devices: split each MoE layer's tokens into M chunks "
             "whose exchanges overlap the experts' compute (default: 1)"),
    cl::value_desc("M"), cl::init(1), cl::sub(compileCommand),
    cl::cat(getMoecCategory()));

static cl::opt<std::string> weightDtype(
    "weight-dtype",
    cl::desc("How the plan stores its large matrices: the expert networks' "
             "(w1, w3, w2 of routed and shared experts) and, on the CPU "
             "target, the dense MatMul weights (attention, dense MLPs, the "
             "output layer; routers stay f32): f32 as in the model, or bf16 "
             "/ f16 (rounded to nearest even; biases, norms and every other "
             "tensor stay f32; products compute in f32), or int8 (symmetric "
             "per output channel with f32 scales; "
             "CPU target), or int4 (routed experts and dense matrices in "
             "blocks of 32 inputs with an f32 scale, as llama.cpp's q4_0; "
             "shared experts and embeddings stay f32; CPU target); "
             "default: f32"),
    cl::value_desc("f32|bf16|f16|int8|int4"), cl::init("f32"),
    cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::opt<bool> widenFloat16(
    "widen-f16",
    cl::desc("Import every float16 tensor (weights, inputs, outputs, Cast "
             "targets) as float32, exactly, and compute in float32: for "
             "float16 models whose ops moec runs in float32 only, such as "
             "onnxruntime-genai's fp16 exports (the weights take twice their "
             "bytes in memory while compiling; --weight-dtype f16 stores "
             "them 16-bit again)"),
    cl::init(false), cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::opt<bool> int8Activations(
    "int8-activations",
    cl::desc("With --weight-dtype int4, or a model with int4/int8 weights "
             "(MatMulNBits, QMoE): quantize the activations of their "
             "products to int8 per block and multiply integers "
             "(onnxruntime's accuracy_level 4, llama.cpp's q8_0 "
             "activations), instead of computing in f32"),
    cl::init(false), cl::sub(compileCommand), cl::cat(getMoecCategory()));
static cl::list<std::string> keepF32(
    "keep-f32",
    cl::desc("With --weight-dtype: keep the dense matrices f32 whose "
             "initializer name, reading MatMul node name or product's graph "
             "output name contains one of these names (e.g. lm_head, "
             "logits)"),
    cl::value_desc("NAME,..."), cl::CommaSeparated, cl::sub(compileCommand),
    cl::cat(getMoecCategory()));

static cl::opt<std::string>
    cudaSource("cuda-source",
               cl::desc("With --target cuda: also write the generated CUDA "
                        "C++ the PTX was compiled from"),
               cl::value_desc("FILE.cu"), cl::init(""), cl::sub(compileCommand),
               cl::cat(getMoecCategory()));

static cl::opt<bool> noVerifyRewrites(
    "no-verify-rewrites",
    cl::desc("Keep every MoE rewrite the detectors prove without running "
             "the replaced layer and its sparse form against each other on "
             "random tokens (translation validation, on by default)"),
    cl::sub(compileCommand), cl::cat(getMoecCategory()));
// Test only: lets a test show that validation rejects a wrong rewrite.
static cl::opt<bool> testCorruptRewrite(
    "moe-test-corrupt-rewrite",
    cl::desc("Test only: double the scaling factor of every detected "
             "router before its rewrite is validated"),
    cl::Hidden, cl::sub(compileCommand), cl::cat(getMoecCategory()));

static cl::opt<uint64_t> maxSeq(
    "max-seq",
    cl::desc("Compile a generation plan (a decode graph with KV-cache inputs "
             "and outputs, docs/cli.md) for sequences of up to S tokens, "
             "prompt and new tokens together"),
    cl::value_desc("S"), cl::init(0), cl::sub(compileCommand),
    cl::cat(getMoecCategory()));
static cl::opt<std::string> prefillPath(
    "prefill",
    cl::desc("With --max-seq: the prefill graph of the pair (token ids and "
             "positions in; logits and the caches out), run once per prompt"),
    cl::value_desc("PREFILL.onnx"), cl::init(""), cl::sub(compileCommand),
    cl::cat(getMoecCategory()));

//===----------------------------------------------------------------------===//
// Reading the options
//===----------------------------------------------------------------------===//

Command getCommand() {
  if (checkCommand)
    return Command::Check;
  if (opsCommand)
    return Command::Ops;
  if (compileCommand)
    return Command::Compile;
  if (inspectCommand)
    return Command::Inspect;
  return Command::None;
}

/// The subcommand given (argv[1] when it is one), for usage hints.
static std::string commandName;

void setCommandName(llvm::StringRef name) { commandName = name.str(); }

int usageError(const llvm::Twine &message) {
  llvm::errs() << "moec: error: " << message << "\n"
               << usageHint(commandName) << "\n";
  return kUsageError;
}

DriverOptions getDriverOptions() {
  DriverOptions options;
  options.model = modelPath;
  options.plan = planPath;
  options.json = json;
  return options;
}

CompileFlags getCompileFlags() {
  CompileFlags flags;
  flags.input.model = modelPath;
  flags.input.prefill = prefillPath;
  flags.input.widenFloat16 = widenFloat16;
  flags.shapes.maxTokens = maxTokens;
  flags.shapes.maxTokensGiven = maxTokens.getNumOccurrences() > 0;
  flags.shapes.dimBounds.assign(dimBounds.begin(), dimBounds.end());
  flags.shapes.fixedDims.assign(fixedDims.begin(), fixedDims.end());
  flags.shapes.maxSeq = maxSeq;
  flags.shapes.maxSeqGiven = maxSeq.getNumOccurrences() > 0;
  flags.output.output = outputPath;
  flags.output.emit = emitKind;
  flags.output.importOnly = importOnly;
  flags.output.emitWeights = emitWeights;
  flags.report.report = reportPath;
  flags.report.verbose = verbose;
  flags.report.quiet = quiet;
  flags.report.testProgress = testProgress;
  flags.target.target = target;
  flags.target.cudaArch = cudaArch;
  flags.target.cudaArchGiven = cudaArch.getNumOccurrences() > 0;
  flags.target.ptxOutput = ptxOutput;
  flags.target.cudaSource = cudaSource;
  flags.parallel.devices = numDevices;
  flags.parallel.microBatches = microBatches;
  flags.parallel.microBatchesGiven = microBatches.getNumOccurrences() > 0;
  flags.parallel.replicateHot = replicateHot;
  flags.parallel.routingProfile = routingProfile;
  flags.weights.weightDtype = weightDtype;
  flags.weights.weightDtypeGiven = weightDtype.getNumOccurrences() > 0;
  flags.weights.keepF32.assign(keepF32.begin(), keepF32.end());
  flags.weights.int8Activations = int8Activations;
  flags.tiers.deviceMemory = deviceMemory;
  flags.tiers.prefetch = tierPrefetch;
  flags.validation.enabled = !noVerifyRewrites;
  flags.validation.testCorruptRewrite = testCorruptRewrite;
  flags.generation = flags.shapes.maxSeqGiven || !flags.input.prefill.empty();
  return flags;
}

//===----------------------------------------------------------------------===//
// Each concern's checks
//===----------------------------------------------------------------------===//

std::string ShapeOptions::verify() const {
  // A plan holds bounds up to kMaxDimBound; larger ones would give a plan
  // the runtime refuses.
  if (maxTokens == 0 || maxTokens > moert::kMaxDimBound)
    return ("--max-tokens must be an integer in [1, " +
            llvm::Twine(moert::kMaxDimBound) + "]")
        .str();
  llvm::StringSet<> boundNames;
  for (const std::string &bound : dimBounds) {
    auto [name, value] = llvm::StringRef(bound).split('=');
    int64_t size = 0;
    if (name.empty() || value.getAsInteger(10, size) || size < 1 ||
        uint64_t(size) > moert::kMaxDimBound)
      return ("--bound must be NAME=N with N in [1, " +
              llvm::Twine(moert::kMaxDimBound) + "], not '" + bound + "'")
          .str();
    if (!boundNames.insert(name).second)
      return ("--bound " + name + " is given twice").str();
  }
  llvm::StringSet<> fixedNames;
  for (const std::string &dim : fixedDims) {
    auto [name, value] = llvm::StringRef(dim).split('=');
    int64_t size = 0;
    if (name.empty() || value.getAsInteger(10, size) || size < 1 ||
        uint64_t(size) > moert::kMaxDimBound)
      return ("--dim must be NAME=N with N in [1, " +
              llvm::Twine(moert::kMaxDimBound) + "], not '" + dim + "'")
          .str();
    if (!fixedNames.insert(name).second || boundNames.contains(name))
      return ("--dim " + name + " is given twice, or also as a --bound").str();
  }
  return "";
}

std::string ShapeOptions::verifyMaxSeq() const {
  if (maxSeq < 2 || maxSeq > moert::kMaxDimBound)
    return ("--max-seq must be an integer in [2, " +
            llvm::Twine(moert::kMaxDimBound) + "]")
        .str();
  return "";
}

std::string OutputOptions::verify() const {
  if (emit != "plan" && emit != "mlir" && emit != "planned-mlir")
    return "--emit must be plan, mlir or planned-mlir, not '" + emit + "'";
  return "";
}

std::string OutputOptions::verifyStages() const {
  if (emit == "plan" && output == "-")
    return "a plan is a binary file: name it with -o FILE";
  if (emit != "mlir" && importOnly)
    return "--import-only needs --emit mlir";
  return "";
}

std::string ReportOptions::verify(const OutputOptions &output) const {
  if (output.emit == "mlir" && !report.empty())
    return "--report describes a planned model; it needs --emit plan or "
           "planned-mlir";
  if (output.emit == "mlir" && verbose)
    return "--verbose lists the MoE layers of a planned model; it needs "
           "--emit plan or planned-mlir";
  return "";
}

bool ReportOptions::showProgress() const {
  return testProgress ||
         (!verbose && llvm::sys::Process::StandardErrIsDisplayed());
}

std::string TargetOptions::verify(const OutputOptions &output) const {
  if (target != "cpu" && target != "cuda")
    return "--target must be cpu or cuda, not '" + target + "'";
  if (!isCuda() && (cudaArchGiven || !ptxOutput.empty() || !cudaSource.empty()))
    return "--cuda-arch, --ptx-output and --cuda-source need --target cuda";
  if (isCuda() && output.emit != "plan")
    return "--target cuda needs --emit plan";
  if (isCuda())
    if (llvm::Expected<uint32_t> arch = cuda::parseCudaArch(cudaArch); !arch)
      return llvm::toString(arch.takeError());
  return "";
}

uint32_t TargetOptions::getCudaArch() const {
  return llvm::cantFail(cuda::parseCudaArch(cudaArch));
}

std::string ParallelOptions::verify() const {
  if (devices < 1)
    return ("--devices must be at least 1, not " + llvm::Twine(devices)).str();
  if (devices > static_cast<int64_t>(moert::kMaxDevices))
    return ("--devices must be at most " + llvm::Twine(moert::kMaxDevices) +
            " (a plan's limit), not " + llvm::Twine(devices))
        .str();
  if (microBatches < 1)
    return ("--micro-batches must be at least 1, not " +
            llvm::Twine(microBatches))
        .str();
  if (static_cast<uint64_t>(microBatches) > moert::kMaxMicroBatches)
    return ("--micro-batches must be at most " +
            llvm::Twine(moert::kMaxMicroBatches) + ", not " +
            llvm::Twine(microBatches))
        .str();
  if (replicateHot < 0)
    return ("--replicate-hot must be at least 0, not " +
            llvm::Twine(replicateHot))
        .str();
  if (replicateHot > 0 && routingProfile.empty())
    return "--replicate-hot needs --routing-profile: the profile says which "
           "experts are hot";
  return "";
}

std::string ParallelOptions::verify(const OutputOptions &output) const {
  if (devices > 1 && output.emit == "mlir")
    return "--devices places experts in the planned model; it needs --emit "
           "plan or planned-mlir";
  return "";
}

std::optional<plan::ExpertWeightType>
WeightOptions::getExpertWeightType() const {
  return llvm::StringSwitch<std::optional<plan::ExpertWeightType>>(weightDtype)
      .Case("f32", plan::ExpertWeightType::F32)
      .Case("bf16", plan::ExpertWeightType::BF16)
      .Case("f16", plan::ExpertWeightType::F16)
      .Case("int8", plan::ExpertWeightType::I8)
      .Case("int4", plan::ExpertWeightType::F32)
      .Default(std::nullopt);
}

std::string WeightOptions::verify(const TargetOptions &target) const {
  std::optional<plan::ExpertWeightType> type = getExpertWeightType();
  if (!type)
    return "--weight-dtype must be f32, bf16, f16, int8 or int4, not '" +
           weightDtype + "'";
  if ((*type == plan::ExpertWeightType::I8 || isInt4()) && target.isCuda())
    return "--weight-dtype " + weightDtype +
           " runs on the CPU backend only; use bf16 or f16 with --target cuda";
  if (!keepF32.empty() && !narrows())
    return "--keep-f32 keeps matrices that --weight-dtype would narrow; it "
           "needs --weight-dtype bf16, f16, int8 or int4";
  if (int8Activations && narrows() && !isInt4())
    return "--int8-activations quantizes the activations of int4 products; "
           "it needs --weight-dtype int4, or the default f32 with a model "
           "whose weights are block-quantized (MatMulNBits, QMoE)";
  for (const std::string &name : keepF32)
    if (name.empty())
      return "--keep-f32 has an empty name";
  return "";
}

std::string WeightOptions::verify(const OutputOptions &output) const {
  if (output.emit == "mlir" && weightDtypeGiven)
    return "--weight-dtype sets how a plan stores the expert weights; it "
           "needs --emit plan or planned-mlir";
  return "";
}

std::string WeightOptions::verify(const ParallelOptions &parallel,
                                  const TierFlags &tiers) const {
  if (isInt4() && parallel.devices > 1)
    return "--weight-dtype int4 does not quantize expert-parallel plans yet; "
           "drop --devices or use --weight-dtype int8";
  if (isInt4() && !tiers.deviceMemory.empty())
    return "--weight-dtype int4 does not tier its experts yet; drop "
           "--device-memory or use --weight-dtype int8";
  return "";
}

std::optional<uint64_t> TierFlags::getDeviceMemoryBytes() const {
  uint64_t bytes = 0;
  if (!deviceMemory.empty() &&
      !moert::parseByteSize(deviceMemory.c_str(), bytes))
    return std::nullopt;
  return bytes;
}

std::string TierFlags::verify(const ParallelOptions &parallel) const {
  if (prefetch != "none" && prefetch != "next-layer" &&
      prefetch != "next-micro-batch")
    return "--prefetch must be none, next-layer or next-micro-batch, not '" +
           prefetch + "'";
  if (prefetch != "none" && deviceMemory.empty())
    return "--prefetch reads cold experts ahead; it needs --device-memory";
  if (parallel.devices == 1 &&
      ((!parallel.routingProfile.empty() && deviceMemory.empty()) ||
       parallel.microBatchesGiven))
    return "--routing-profile and --micro-batches need --devices N with "
           "N > 1 (or, for the profile, --device-memory)";
  if (!getDeviceMemoryBytes())
    return "--device-memory must be a positive byte count such as "
           "1073741824, 512M or 4G, not '" +
           deviceMemory + "'";
  return "";
}

std::string TierFlags::verify(const OutputOptions &output) const {
  if (!deviceMemory.empty() && output.emit != "plan")
    return "--device-memory tiers a plan's expert weights; it needs --emit "
           "plan";
  return "";
}

//===----------------------------------------------------------------------===//
// The whole command line
//===----------------------------------------------------------------------===//

std::string CompileFlags::verify() const {
  return generation ? verifyGeneration() : verifyOnePass();
}

std::string CompileFlags::verifyOnePass() const {
  // The order is the users' contract: which error a command line with
  // several mistakes names first (test/Errors).
  for (auto check : {
           +[](const CompileFlags &f) { return f.output.verify(); },
           +[](const CompileFlags &f) { return f.shapes.verify(); },
           +[](const CompileFlags &f) { return f.output.verifyStages(); },
           +[](const CompileFlags &f) { return f.report.verify(f.output); },
           +[](const CompileFlags &f) { return f.parallel.verify(); },
           +[](const CompileFlags &f) { return f.tiers.verify(f.parallel); },
           +[](const CompileFlags &f) { return f.tiers.verify(f.output); },
           +[](const CompileFlags &f) { return f.parallel.verify(f.output); },
           +[](const CompileFlags &f) { return f.weights.verify(f.target); },
           +[](const CompileFlags &f) { return f.weights.verify(f.output); },
           +[](const CompileFlags &f) {
             return f.weights.verify(f.parallel, f.tiers);
           },
           +[](const CompileFlags &f) { return f.target.verify(f.output); },
           +[](const CompileFlags &f) { return f.verifyOutputPaths(); },
       })
    if (std::string problem = check(*this); !problem.empty())
      return problem;
  return "";
}

std::string CompileFlags::verifyGeneration() const {
  if (std::string problem = shapes.verifyMaxSeq(); !problem.empty())
    return problem;
  if (output.emit != "plan" || output.output == "-")
    return "--max-seq and --prefill compile a generation plan: name it with "
           "-o FILE (no --emit)";
  if (shapes.maxTokensGiven)
    return "--max-seq bounds a generation plan's sequences; drop "
           "--max-tokens";
  if (target.target != "cpu" || output.importOnly)
    return "generation plans are cpu plans for now: drop --target and "
           "--import-only";
  for (auto check : {
           +[](const CompileFlags &f) { return f.parallel.verify(); },
           +[](const CompileFlags &f) { return f.tiers.verify(f.parallel); },
           +[](const CompileFlags &f) { return f.weights.verify(f.target); },
           +[](const CompileFlags &f) {
             return f.weights.verify(f.parallel, f.tiers);
           },
           +[](const CompileFlags &f) { return f.shapes.verify(); },
           +[](const CompileFlags &f) { return f.verifyOutputPaths(); },
       })
    if (std::string problem = check(*this); !problem.empty())
      return problem;
  return "";
}

std::string CompileFlags::verifyOutputPaths() const {
  for (auto [flag, path] :
       {std::pair("-o", &output.output), std::pair("--report", &report.report),
        std::pair("--ptx-output", &target.ptxOutput),
        std::pair("--cuda-source", &target.cudaSource)})
    if (std::string problem = checkOutputPath(flag, *path); !problem.empty())
      return problem;
  return "";
}

std::vector<std::pair<std::string, std::string>>
CompileFlags::getProvenanceFlags() const {
  std::vector<std::pair<std::string, std::string>> flags = {
      {"target", target.target}};
  if (target.isCuda())
    flags.emplace_back("cuda-arch", target.cudaArch);
  if (generation)
    flags.emplace_back("max-seq", std::to_string(shapes.maxSeq));
  else
    flags.emplace_back("max-tokens", std::to_string(shapes.maxTokens));
  flags.emplace_back("bound", llvm::join(shapes.dimBounds, ","));
  if (!shapes.fixedDims.empty())
    flags.emplace_back("dim", llvm::join(shapes.fixedDims, ","));
  flags.emplace_back("devices", std::to_string(parallel.devices));
  flags.emplace_back("routing-profile", parallel.routingProfile);
  flags.emplace_back("replicate-hot", std::to_string(parallel.replicateHot));
  flags.emplace_back("micro-batches", std::to_string(parallel.microBatches));
  flags.emplace_back("weight-dtype", weights.weightDtype);
  if (!weights.keepF32.empty())
    flags.emplace_back("keep-f32", llvm::join(weights.keepF32, ","));
  if (weights.int8Activations)
    flags.emplace_back("int8-activations", "1");
  if (input.widenFloat16)
    flags.emplace_back("widen-f16", "1");
  flags.emplace_back("device-memory", tiers.deviceMemory);
  flags.emplace_back("prefetch", tiers.prefetch);
  return flags;
}

} // namespace moec
