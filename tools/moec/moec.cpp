//===- moec.cpp - the moec compiler driver --------------------------------===//
//
//   moec check MODEL [--json]       which ops of a model moec imports
//   moec ops [--json]               every ONNX op version moec imports
//   moec inspect PLAN [--json]      what a plan file holds
//   moec verify MODEL [--plan PLAN] [--input NAME=FILE.npy ...] [--rtol R]
//                [--atol A] [--tokens N] [--seed S]   (tools/verify)
//   moec compile MODEL -o OUT [--emit plan|mlir|planned-mlir] [--max-tokens N]
//                [--report FILE.json] [--verbose] [--emit-weights]
//                [--import-only] [--target cpu|cuda] [--cuda-arch sm_90]
//                [--ptx-output FILE.ptx] [--cuda-source FILE.cu]
//                [--devices N] [--micro-batches M]
//                [--routing-profile FILE.json] [--replicate-hot K]
//                [--weight-dtype f32|bf16|f16|int8]
//   moec compile DECODE.onnx [--prefill PREFILL.onnx] --max-seq S -o OUT
//                (a generation plan; docs/cli.md)
//
// Exit status: 0 on success, 1 when the model is invalid, uses an unsupported
// op or fails to compile, 2 on a usage error.
//
//===----------------------------------------------------------------------===//

#include "CommandLine.h"
#include "CompileSummary.h"
#include "GenaiFolder.h"
#include "compiler/InitAll.h"
#include "compiler/cuda/CudaTarget.h"
#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Import.h"
#include "compiler/plan/CompilePipeline.h"
#include "compiler/plan/Generation.h"
#include "compiler/plan/PlanEmitter.h"
#include "compiler/plan/Provenance.h"
#include "compiler/verify/RewriteValidator.h"
#include "moert/file_io.h"
#include "moert/format.h"
#include "moert/inspect.h"
#include "moert/plan_writer.h"
#include "moert/version.h"
#include "passes/RoutingProfile.h"
#include "tools/FatalErrors.h"
#include "tools/VerifyTool.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;
namespace onnx_import = moec::onnx_import;

namespace {
enum ExitCode { kSuccess = 0, kFailure = 1, kUsageError = 2 };
} // namespace

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

static cl::OptionCategory moecCategory("moec options");

static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx>"),
                                      cl::sub(checkCommand),
                                      cl::sub(compileCommand),
                                      cl::cat(moecCategory));
static cl::opt<std::string> planPath(cl::Positional, cl::Required,
                                     cl::desc("<plan.bin>"),
                                     cl::sub(inspectCommand),
                                     cl::cat(moecCategory));
static cl::opt<bool> json("json", cl::desc("Print JSON instead of a table"),
                          cl::sub(checkCommand), cl::sub(opsCommand),
                          cl::sub(inspectCommand), cl::cat(moecCategory));
static cl::opt<std::string> outputPath("o",
                                       cl::desc("Output file (default: -, "
                                                "stdout, for --emit mlir)"),
                                       cl::value_desc("path"), cl::init("-"),
                                       cl::sub(compileCommand),
                                       cl::cat(moecCategory));
static cl::opt<std::string> emitKind(
    "emit",
    cl::desc("What to emit: plan (the plan file moe-run executes), mlir "
             "(the imported, simplified IR) or planned-mlir (the IR after "
             "fusion, shape bounds and memory planning); default: plan"),
    cl::value_desc("plan|mlir|planned-mlir"), cl::init("plan"),
    cl::sub(compileCommand), cl::cat(moecCategory));
static cl::list<std::string>
    dimBounds("bound",
              cl::desc("Bound of the dynamic input dimensions named NAME "
                       "(ONNX dim_param), e.g. --bound batch=1; others take "
                       "--max-tokens"),
              cl::value_desc("NAME=N"), cl::sub(compileCommand),
              cl::cat(moecCategory));
static cl::opt<std::string>
    reportPath("report",
               cl::desc("Write a JSON compile report (memory plan, op "
                        "counts) to this file"),
               cl::value_desc("FILE.json"), cl::init(""),
               cl::sub(compileCommand), cl::cat(moecCategory));
static cl::opt<uint64_t>
    maxTokens("max-tokens",
              cl::desc("Upper bound of each dynamic input dimension that "
                       "--bound does not name, which buffers are planned "
                       "for (default: 256)"),
              cl::value_desc("N"), cl::init(256), cl::sub(compileCommand),
              cl::cat(moecCategory));
static cl::opt<bool>
    importOnly("import-only",
               cl::desc("Stop after the import: print the IR exactly as the "
                        "ONNX frontend built it"),
               cl::sub(compileCommand), cl::cat(moecCategory));
static cl::opt<bool>
    verbose("verbose",
            cl::desc("Print the detected MoE layers (gate and expert "
                     "configuration) as a table on stderr, and every "
                     "detector's reason for a layer left generic"),
            cl::sub(compileCommand), cl::cat(moecCategory));
static cl::opt<bool>
    quiet("quiet",
          cl::desc("Print no summary line after writing the plan (errors, "
                   "warnings and remarks still print)"),
          cl::sub(compileCommand), cl::cat(moecCategory));
// Test only: shows the progress line off a terminal too.
static cl::opt<bool> testProgress(
    "moe-test-progress",
    cl::desc("Test only: show progress on stderr even when it is no terminal"),
    cl::Hidden, cl::sub(compileCommand), cl::cat(moecCategory));
static cl::opt<bool>
    emitWeights("emit-weights",
                cl::desc("Print weights in the IR instead of eliding them"),
                cl::sub(compileCommand), cl::cat(moecCategory));

static cl::opt<std::string>
    target("target",
           cl::desc("The backend the plan is for: cpu (default), or cuda "
                    "(generates the plan's CUDA kernels through NVRTC; "
                    "docs/cuda.md)"),
           cl::value_desc("cpu|cuda"), cl::init("cpu"), cl::sub(compileCommand),
           cl::cat(moecCategory));
static cl::opt<std::string>
    cudaArch("cuda-arch",
             cl::desc("GPU architecture of --target cuda's kernels "
                      "(default: sm_90)"),
             cl::value_desc("sm_NN"), cl::init("sm_90"),
             cl::sub(compileCommand), cl::cat(moecCategory));
static cl::opt<std::string>
    ptxOutput("ptx-output",
              cl::desc("With --target cuda: also write the plan's PTX module "
                       "to this file (e.g. for ptxas)"),
              cl::value_desc("FILE.ptx"), cl::init(""), cl::sub(compileCommand),
              cl::cat(moecCategory));

static cl::opt<int64_t>
    numDevices("devices",
               cl::desc("Expert parallelism: compile one schedule per device, "
                        "experts placed on the devices, dense parts "
                        "data-parallel (docs/expert-parallelism.md; "
                        "default: 1)"),
               cl::value_desc("N"), cl::init(1), cl::sub(compileCommand),
               cl::cat(moecCategory));
static cl::opt<std::string> deviceMemory(
    "device-memory",
    cl::desc("Tier the routed experts' weights for a memory budget per "
             "device (bytes, or with K/M/G/T): resident weights first, "
             "then the hottest experts (by --routing-profile, "
             "else by index); the rest are read from the plan on demand "
             "(docs/tiered-experts.md)"),
    cl::value_desc("BYTES"), cl::init(""), cl::sub(compileCommand),
    cl::cat(moecCategory));
static cl::opt<std::string> tierPrefetch(
    "prefetch",
    cl::desc("With --device-memory: how sessions read cold experts ahead "
             "unless moe-run --prefetch says otherwise: none (default), "
             "next-layer (pre-gating: the next layer's router on this "
             "layer's input) or next-micro-batch (the next micro-batch's "
             "exchanged routing); the cold cache keeps room for a second "
             "layer's experts where the budget allows"),
    cl::value_desc("MODE"), cl::init("none"), cl::sub(compileCommand),
    cl::cat(moecCategory));
static cl::opt<std::string> routingProfile(
    "routing-profile",
    cl::desc("With --devices: place experts by the expected load in this "
             "`moe-run --stats` JSON (moe_layers[i].tokens_per_expert) "
             "instead of by parameter bytes; with --device-memory: keep the "
             "most loaded experts resident"),
    cl::value_desc("FILE.json"), cl::init(""), cl::sub(compileCommand),
    cl::cat(moecCategory));
static cl::opt<int64_t> replicateHot(
    "replicate-hot",
    cl::desc("With --routing-profile: give the K most loaded experts of each "
             "layer a second slot on another device (default: 0)"),
    cl::value_desc("K"), cl::init(0), cl::sub(compileCommand),
    cl::cat(moecCategory));
static cl::opt<int64_t> microBatches(
    "micro-batches",
    cl::desc("With --devices: split each MoE layer's tokens into M chunks "
             "whose exchanges overlap the experts' compute (default: 1)"),
    cl::value_desc("M"), cl::init(1), cl::sub(compileCommand),
    cl::cat(moecCategory));

static cl::opt<std::string> weightDtype(
    "weight-dtype",
    cl::desc("How the plan stores the expert networks' matrices (w1, w3, w2 "
             "of routed and shared experts): f32 as in the model, or bf16 / "
             "f16 (rounded to nearest even; biases and every other tensor "
             "stay f32; the experts compute in f32), or int8 (routed experts "
             "only, symmetric per output channel with f32 scales; CPU "
             "target); default: f32"),
    cl::value_desc("f32|bf16|f16|int8"), cl::init("f32"),
    cl::sub(compileCommand), cl::cat(moecCategory));

static cl::opt<std::string>
    cudaSource("cuda-source",
               cl::desc("With --target cuda: also write the generated CUDA "
                        "C++ the PTX was compiled from"),
               cl::value_desc("FILE.cu"), cl::init(""), cl::sub(compileCommand),
               cl::cat(moecCategory));

static cl::opt<bool> noVerifyRewrites(
    "no-verify-rewrites",
    cl::desc("Keep every MoE rewrite the detectors prove without running "
             "the replaced layer and its sparse form against each other on "
             "random tokens (translation validation, on by default)"),
    cl::sub(compileCommand), cl::cat(moecCategory));
// Test only: lets a test show that validation rejects a wrong rewrite.
static cl::opt<bool> testCorruptRewrite(
    "moe-test-corrupt-rewrite",
    cl::desc("Test only: double the scaling factor of every detected "
             "router before its rewrite is validated"),
    cl::Hidden, cl::sub(compileCommand), cl::cat(moecCategory));

static cl::opt<uint64_t> maxSeq(
    "max-seq",
    cl::desc("Compile a generation plan (a decode graph with KV-cache inputs "
             "and outputs, docs/cli.md) for sequences of up to S tokens, "
             "prompt and new tokens together"),
    cl::value_desc("S"), cl::init(0), cl::sub(compileCommand),
    cl::cat(moecCategory));
static cl::opt<std::string> prefillPath(
    "prefill",
    cl::desc("With --max-seq: the prefill graph of the pair (token ids and "
             "positions in; logits and the caches out), run once per prompt"),
    cl::value_desc("PREFILL.onnx"), cl::init(""), cl::sub(compileCommand),
    cl::cat(moecCategory));

/// The compile options that shape a plan, as the plan's provenance records
/// them (defaults included, in this fixed order).
static std::vector<std::pair<std::string, std::string>>
getCompileFlags(bool generation) {
  std::vector<std::pair<std::string, std::string>> flags = {{"target", target}};
  if (target == "cuda")
    flags.emplace_back("cuda-arch", cudaArch);
  if (generation)
    flags.emplace_back("max-seq", std::to_string(maxSeq));
  else
    flags.emplace_back("max-tokens", std::to_string(maxTokens));
  flags.emplace_back("bound", llvm::join(dimBounds, ","));
  flags.emplace_back("devices", std::to_string(numDevices));
  flags.emplace_back("routing-profile", routingProfile);
  flags.emplace_back("replicate-hot", std::to_string(replicateHot));
  flags.emplace_back("micro-batches", std::to_string(microBatches));
  flags.emplace_back("weight-dtype", weightDtype);
  flags.emplace_back("device-memory", deviceMemory);
  flags.emplace_back("prefetch", tierPrefetch);
  return flags;
}

/// A finalizer that records the plan's provenance, then runs `next` (if
/// any); fails, with the error printed, when a model file cannot be hashed.
static FailureOr<moec::plan::PlanFinalizer>
recordProvenance(bool generation, moec::plan::PlanFinalizer next = {}) {
  FailureOr<moert::ProvenanceDesc> provenance = moec::plan::buildProvenance(
      modelPath, prefillPath, getCompileFlags(generation), llvm::errs());
  if (failed(provenance))
    return failure();
  return moec::plan::PlanFinalizer(
      [provenance = std::move(*provenance),
       next = std::move(next)](moert::PlanWriter &writer) {
        writer.setProvenance(provenance);
        return next ? next(writer) : success();
      });
}

/// The subcommand given (argv[1] when it is one), for usage hints.
static std::string commandName;

/// Reports a usage error, `moec: error: MESSAGE` and a one-line hint, and
/// returns its exit code.
static int usageError(const llvm::Twine &message) {
  llvm::errs() << "moec: error: " << message << "\n"
               << moec::usageHint(commandName) << "\n";
  return kUsageError;
}

/// Creates a context with moec's dialects whose diagnostics print as
/// `<file>: error: <subject>: <message>`.
static void configureContext(MLIRContext &context) {
  DialectRegistry registry;
  moec::registerAllDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  // One line per error: the op a verifier complains about is named by its
  // location already.
  context.printOpOnDiagnostic(false);
}

//===----------------------------------------------------------------------===//
// moec check
//===----------------------------------------------------------------------===//

static void printCoverageJson(const onnx_import::ModelCoverage &coverage,
                              bool allSupported) {
  llvm::json::Object opsets;
  for (const auto &[domain, version] : coverage.opsets)
    opsets[domain] = version;
  llvm::json::Array ops;
  for (const onnx_import::OpCoverage &op : coverage.ops)
    ops.push_back(llvm::json::Object{
        {"domain", op.domain},
        {"op_type", op.opType},
        {"opset", op.opset},
        {"version", op.sinceVersion ? llvm::json::Value(op.sinceVersion)
                                    : llvm::json::Value(nullptr)},
        {"nodes", op.numNodes},
        {"supported", op.supported}});
  llvm::json::Object root{{"model", modelPath.getValue()},
                          {"ir_version", coverage.irVersion},
                          {"opset_import", std::move(opsets)},
                          {"nodes", coverage.numNodes},
                          {"ops", std::move(ops)},
                          {"supported", allSupported}};
  llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(root)))
               << "\n";
}

static void printCoverageTable(const onnx_import::ModelCoverage &coverage,
                               int64_t numUnsupported) {
  llvm::raw_ostream &os = llvm::outs();
  os << modelPath << ": ir_version " << coverage.irVersion << ", opsets ";
  llvm::interleaveComma(coverage.opsets, os, [&](const auto &opset) {
    os << opset.first << " " << opset.second;
  });
  os << ", " << coverage.numNodes << " nodes\n";
  size_t domainWidth = 6, opWidth = 2;
  for (const onnx_import::OpCoverage &op : coverage.ops) {
    domainWidth = std::max(domainWidth, op.domain.size());
    opWidth = std::max(opWidth, op.opType.size());
  }
  os << llvm::left_justify("domain", domainWidth) << "  "
     << llvm::left_justify("op", opWidth) << "  opset  version  nodes  "
     << "status\n";
  for (const onnx_import::OpCoverage &op : coverage.ops) {
    os << llvm::left_justify(op.domain, domainWidth) << "  "
       << llvm::left_justify(op.opType, opWidth) << "  "
       << llvm::right_justify(std::to_string(op.opset), 5) << "  "
       << llvm::right_justify(
              op.sinceVersion ? std::to_string(op.sinceVersion) : "-", 7)
       << "  " << llvm::right_justify(std::to_string(op.numNodes), 5) << "  "
       << (op.supported ? "supported" : "unsupported") << "\n";
  }
  if (numUnsupported)
    os << numUnsupported << " of " << coverage.ops.size()
       << " op types unsupported\n";
  else
    os << "all " << coverage.ops.size() << " op types supported\n";
}

static int runCheck() {
  MLIRContext context;
  configureContext(context);
  onnx_import::ModelDiagnosticHandler diagnostics(&context, llvm::errs(),
                                                  "moec");
  FailureOr<onnx_import::ModelCoverage> coverage =
      onnx_import::checkOnnxModel(&context, modelPath);
  if (failed(coverage))
    return kFailure;
  int64_t numUnsupported =
      llvm::count_if(coverage->ops, [](const onnx_import::OpCoverage &op) {
        return !op.supported;
      });
  if (json)
    printCoverageJson(*coverage, numUnsupported == 0);
  else
    printCoverageTable(*coverage, numUnsupported);
  return numUnsupported ? kFailure : kSuccess;
}

//===----------------------------------------------------------------------===//
// moec ops
//===----------------------------------------------------------------------===//

static int runOps() {
  MLIRContext context;
  configureContext(context);
  std::vector<onnx_import::SupportedOp> ops =
      onnx_import::getSupportedOps(&context);
  if (json) {
    llvm::json::Array array;
    for (const onnx_import::SupportedOp &op : ops)
      array.push_back(llvm::json::Object{
          {"domain", op.domain},
          {"op_type", op.opType},
          {"since_version", op.sinceVersion},
          {"first_opset", op.firstOpset},
          {"last_opset", op.lastOpset == INT64_MAX
                             ? llvm::json::Value(nullptr)
                             : llvm::json::Value(op.lastOpset)},
          {"target", op.targetOp},
          {"available", op.available},
          {"inputs", op.inputs},
          {"target_min_operands", op.targetMinOperands}});
    llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(array)))
                 << "\n";
    return kSuccess;
  }
  size_t opWidth = 2;
  for (const onnx_import::SupportedOp &op : ops)
    opWidth = std::max(opWidth, op.domain.size() + 1 + op.opType.size());
  llvm::raw_ostream &os = llvm::outs();
  os << llvm::left_justify("op", opWidth) << "  version  opsets  becomes\n";
  for (const onnx_import::SupportedOp &op : ops) {
    std::string opsets = std::to_string(op.firstOpset);
    if (op.lastOpset == INT64_MAX)
      opsets += "+";
    else if (op.lastOpset != op.firstOpset)
      opsets += "-" + std::to_string(op.lastOpset);
    os << llvm::left_justify(op.domain + "." + op.opType, opWidth) << "  "
       << llvm::right_justify(std::to_string(op.sinceVersion), 7) << "  "
       << llvm::left_justify(opsets, 6) << "  "
       << (op.targetOp.empty() ? "(no op)" : op.targetOp)
       << (op.available ? "" : " (not in the dialect)") << "\n";
  }
  return kSuccess;
}

//===----------------------------------------------------------------------===//
// moec compile
//===----------------------------------------------------------------------===//

/// Checks that every --bound names a dimension of the model's inputs (ONNX
/// dim_param): a misspelt name would otherwise leave that dimension at
/// --max-tokens without a word.
static LogicalResult checkBoundNames(ModuleOp module) {
  llvm::SetVector<StringRef> names;
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto params = func.getArgAttrOfType<ArrayAttr>(i, "moe.dim_params"))
        for (auto param : params.getAsRange<StringAttr>())
          if (!param.getValue().empty())
            names.insert(param.getValue());
  for (const std::string &bound : dimBounds) {
    StringRef name = StringRef(bound).split('=').first;
    if (names.contains(name))
      continue;
    InFlightDiagnostic diag =
        emitError(onnx_import::getModelLoc(module.getContext(), modelPath));
    diag << "--bound " << bound << ": the model's inputs have no dimension "
         << "named '" << name << "' ";
    if (names.empty()) {
      diag << "(they have no named dimensions; --max-tokens bounds every "
              "dynamic one)";
    } else {
      diag << "(their dim_params: ";
      llvm::interleaveComma(names, diag);
      diag << ")";
    }
    return failure();
  }
  return success();
}

/// Checks each device's planned activation arena: larger than a plan can
/// hold is an error; larger than this machine's memory (moe-run refuses such
/// a plan here) a warning. Both name the bounds of the inputs' dynamic
/// dimensions that size it.
static LogicalResult checkArenaSize(ModuleOp module) {
  uint64_t memory = moert::physicalMemoryBytes();
  FailureOr<SmallVector<func::FuncOp>> funcs =
      moec::plan::getDeviceFunctions(module);
  if (failed(funcs))
    return failure();
  llvm::StringSet<> given;
  for (const std::string &bound : dimBounds)
    given.insert(StringRef(bound).split('=').first);
  for (auto [device, func] : llvm::enumerate(*funcs)) {
    auto arena = func->getAttrOfType<IntegerAttr>("moe.arena_size");
    if (!arena)
      continue;
    uint64_t arenaBytes = arena.getValue().getZExtValue();
    bool tooLarge = arenaBytes > moert::kMaxArenaSize;
    if (!tooLarge && (!memory || arenaBytes <= memory))
      continue;
    std::vector<std::string> bounds;
    auto addBound = [&](std::string bound) {
      if (!llvm::is_contained(bounds, bound))
        bounds.push_back(std::move(bound));
    };
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
      auto bound = func.getArgAttrOfType<DenseI64ArrayAttr>(i, "moe.bound");
      auto params = func.getArgAttrOfType<ArrayAttr>(i, "moe.dim_params");
      if (!type || !bound || bound.size() != type.getRank())
        continue;
      for (int64_t d = 0; d < type.getRank(); ++d) {
        if (!type.isDynamicDim(d))
          continue;
        StringRef name;
        if (params && d < int64_t(params.size()))
          if (auto param = dyn_cast<StringAttr>(params[d]))
            name = param.getValue();
        std::string size = std::to_string(bound[d]);
        if (name.empty())
          addBound("--max-tokens " + size);
        else if (given.contains(name))
          addBound(("--bound " + name + "=" + size).str());
        else
          addBound((name + "=" + size + " (--max-tokens)").str());
      }
    }
    Location loc = onnx_import::getModelLoc(module.getContext(), modelPath);
    InFlightDiagnostic diag = tooLarge ? emitError(loc) : emitWarning(loc);
    diag << "the planned activation arena";
    if (funcs->size() > 1)
      diag << " of device " << device;
    diag << " is " << arenaBytes << " bytes, more than ";
    if (tooLarge)
      diag << "a plan holds (" << moert::kMaxArenaSize << ")";
    else
      diag << "this machine's memory (" << memory
           << " bytes), and moe-run refuses it here";
    diag << "; it is planned for ";
    if (bounds.empty())
      diag << "the model's static shapes";
    else
      llvm::interleaveComma(bounds, diag);
    if (tooLarge)
      return failure();
  }
  return success();
}

static int runGenerationCompile();

/// --weight-dtype as an ExpertWeightType; nullopt for an unknown name.
static std::optional<moec::plan::ExpertWeightType> parseWeightDtype() {
  return llvm::StringSwitch<std::optional<moec::plan::ExpertWeightType>>(
             weightDtype)
      .Case("f32", moec::plan::ExpertWeightType::F32)
      .Case("bf16", moec::plan::ExpertWeightType::BF16)
      .Case("f16", moec::plan::ExpertWeightType::F16)
      .Case("int8", moec::plan::ExpertWeightType::I8)
      .Default(std::nullopt);
}

/// The usage error of a --weight-dtype that parseWeightDtype rejects.
static std::string weightDtypeError() {
  return "--weight-dtype must be f32, bf16, f16 or int8, not '" + weightDtype +
         "'";
}

/// The usage error of the --bound flags ("" when they are well formed).
static std::string checkBoundFlags() {
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
  return "";
}

/// The usage error of the expert-parallel flags (--devices, --micro-batches,
/// --replicate-hot; "" when they are in range). One-pass and generation
/// compiles share them.
static std::string checkDeviceFlags() {
  if (numDevices < 1)
    return ("--devices must be at least 1, not " +
            llvm::Twine(numDevices.getValue()))
        .str();
  if (numDevices > static_cast<int64_t>(moert::kMaxDevices))
    return ("--devices must be at most " + llvm::Twine(moert::kMaxDevices) +
            " (a plan's limit), not " + llvm::Twine(numDevices.getValue()))
        .str();
  if (microBatches < 1)
    return ("--micro-batches must be at least 1, not " +
            llvm::Twine(microBatches.getValue()))
        .str();
  if (static_cast<uint64_t>(microBatches) > moert::kMaxMicroBatches)
    return ("--micro-batches must be at most " +
            llvm::Twine(moert::kMaxMicroBatches) + ", not " +
            llvm::Twine(microBatches.getValue()))
        .str();
  if (replicateHot < 0)
    return ("--replicate-hot must be at least 0, not " +
            llvm::Twine(replicateHot.getValue()))
        .str();
  if (replicateHot > 0 && routingProfile.empty())
    return "--replicate-hot needs --routing-profile: the profile says which "
           "experts are hot";
  return "";
}

/// A tiered plan's tiers, as the runtime reads them back from the written
/// plan: printed with --verbose, and the report's "tiers" (one entry per
/// device) with --report.
/// The problem with --prefetch, or "".
static std::string checkPrefetchFlag() {
  if (tierPrefetch != "none" && tierPrefetch != "next-layer" &&
      tierPrefetch != "next-micro-batch")
    return "--prefetch must be none, next-layer or next-micro-batch, not '" +
           tierPrefetch + "'";
  if (tierPrefetch != "none" && deviceMemory.empty())
    return "--prefetch reads cold experts ahead; it needs --device-memory";
  return "";
}

/// Parses --device-memory into `bytes`; false when it is no byte count.
static bool parseDeviceMemory(uint64_t &bytes) {
  return moert::parseByteSize(deviceMemory.c_str(), bytes);
}

static std::string deviceMemoryError() {
  return "--device-memory must be a positive byte count such as 1073741824, "
         "512M or 4G, not '" +
         deviceMemory + "'";
}

/// The tiers of --device-memory, with the loads of --routing-profile read
/// against `module`'s MoE layers.
static FailureOr<moec::plan::TierOptions> getTierOptions(ModuleOp module,
                                                         uint64_t bytes) {
  moec::plan::TierOptions tiers;
  tiers.deviceMemory = bytes;
  tiers.prefetch = tierPrefetch;
  if (bytes && !routingProfile.empty()) {
    FailureOr<moec::RoutingProfile> profile =
        moec::readRoutingProfile(module, routingProfile);
    if (failed(profile))
      return failure();
    for (const auto &layer : *profile)
      tiers.loads.emplace_back(layer.begin(), layer.end());
  }
  return tiers;
}

/// Loads the plan just written as moe-run will (its checksums aside), so
/// that a graph the runtime cannot run (an op on a dtype it has no kernel
/// for, ...) is one error now, naming the step (the model's node), rather
/// than a plan that every moe-run refuses. The loader's checks are the one
/// statement of what the runtime supports; the file is removed on failure.
static FailureOr<std::unique_ptr<moert::Plan>>
loadWrittenPlan(ModuleOp module) {
  moert::LoadOptions load;
  load.verifyWeightChecksums = false; // Written just now.
  absl::StatusOr<std::unique_ptr<moert::Plan>> plan =
      moert::Plan::load(outputPath, load);
  if (plan.ok())
    return std::move(*plan);
  llvm::sys::fs::remove(outputPath);
  return module.emitError("the runtime cannot run this model, so no plan is "
                          "written: ")
         << std::string(plan.status().message());
}

/// Prints (--verbose) and reports (--report, with `extra`'s entries) the
/// tiers of `plan`, the plan just written, read back from it.
static LogicalResult reportTiers(ModuleOp module, const moert::Plan &plan,
                                 const llvm::StringMap<int64_t> &opsBefore,
                                 moec::plan::ExpertWeightType expertWeights,
                                 llvm::json::Object extra = {}) {
  llvm::json::Array devices;
  for (int d = 0; d < plan.numDevices(); ++d) {
    absl::StatusOr<moert::ExpertTiersDesc> tiers = plan.expertTiers(d);
    if (!tiers.ok())
      return module.emitError(std::string(tiers.status().message()));
    // A policy that reads nothing ahead is a mistake the user should hear
    // of now, not find in the stats of every run.
    if (tiers->prefetch != "none" && !tiers->layersReadAhead) {
      llvm::sys::fs::remove(outputPath);
      return module.emitError("--prefetch ")
             << tiers->prefetch << ": no tiered layer of device " << d
             << " can be read ahead ("
             << (tiers->prefetch == "next-layer"
                     ? "pre-gating needs two tiered layers in a row whose "
                       "routers are a MatMul or Gemm of the same hidden "
                       "size"
                     : "the next micro-batch's routing is known early only "
                       "in an expert-parallel plan of several micro-batches "
                       "(--devices N --micro-batches M)")
             << "); the plan is not written";
    }
    if (verbose)
      llvm::errs() << "moec: device " << d << " "
                   << moert::describeTiersText(*tiers, "");
    llvm::Expected<llvm::json::Value> json =
        llvm::json::parse(moert::describeTiersJson(*tiers));
    if (!json)
      return module.emitError(llvm::toString(json.takeError()));
    devices.push_back(std::move(*json));
  }
  if (reportPath.empty())
    return success();
  extra["tiers"] = std::move(devices);
  return moec::plan::writeReport(module, opsBefore, reportPath, expertWeights,
                                 std::move(extra));
}

/// The usage error of the first output path that cannot be written, or "":
/// found now rather than after a long compile.
static std::string checkOutputPaths() {
  for (auto [flag, path] :
       {std::pair("-o", &outputPath), std::pair("--report", &reportPath),
        std::pair("--ptx-output", &ptxOutput),
        std::pair("--cuda-source", &cudaSource)})
    if (std::string problem = moec::checkOutputPath(flag, *path);
        !problem.empty())
      return problem;
  return "";
}

/// Whether to show progress: on a terminal, unless --verbose already
/// prints (a rewritten line would mix with it).
static bool showProgress() {
  return testProgress ||
         (!verbose && llvm::sys::Process::StandardErrIsDisplayed());
}

/// The longest sequence a builder folder's plan takes unless --max-seq says
/// otherwise: the caches are sized for it, and exports declare their whole
/// context (128K tokens for gpt-oss).
constexpr uint64_t kDefaultFolderMaxSeq = 4096;
/// The eos ids of the builder folder being compiled, for the plan.
static std::vector<int64_t> folderEosIds;
/// The builder folder being compiled, whose tokenizer files go beside the
/// plan; empty when compiling a model file.
static std::optional<moec::GenaiFolder> genaiFolder;

static int runCompile() {
  if (moec::isGenaiFolder(modelPath)) {
    // An onnxruntime-genai folder is a generation model: its decoder, with
    // the sequence length its config gives (at most the default).
    moec::GenaiFolder folder;
    std::string error;
    if (!moec::readGenaiFolder(modelPath, folder, error)) {
      llvm::errs() << "moec: error: " << error << "\n";
      return kFailure;
    }
    modelPath.setValue(folder.modelPath);
    folderEosIds = folder.eosTokenIds;
    genaiFolder = folder;
    if (!maxSeq.getNumOccurrences())
      maxSeq.setValue(std::min(folder.maxLength, kDefaultFolderMaxSeq));
    return runGenerationCompile();
  }
  if (maxSeq.getNumOccurrences() || !prefillPath.empty())
    return runGenerationCompile();
  if (emitKind != "plan" && emitKind != "mlir" && emitKind != "planned-mlir")
    return usageError("--emit must be plan, mlir or planned-mlir, not '" +
                      emitKind + "'");
  // A plan holds bounds up to kMaxDimBound; larger ones would give a plan
  // the runtime refuses.
  if (maxTokens == 0 || maxTokens > moert::kMaxDimBound)
    return usageError("--max-tokens must be an integer in [1, " +
                      llvm::Twine(moert::kMaxDimBound) + "]");
  if (std::string problem = checkBoundFlags(); !problem.empty())
    return usageError(problem);
  if (emitKind == "plan" && outputPath == "-")
    return usageError("a plan is a binary file: name it with -o FILE");
  if (emitKind != "mlir" && importOnly)
    return usageError("--import-only needs --emit mlir");
  if (emitKind == "mlir" && !reportPath.empty())
    return usageError("--report describes a planned model; it needs "
                      "--emit plan or planned-mlir");
  if (emitKind == "mlir" && verbose)
    return usageError("--verbose lists the MoE layers of a planned model; it "
                      "needs --emit plan or planned-mlir");
  if (std::string problem = checkDeviceFlags(); !problem.empty())
    return usageError(problem);
  if (std::string problem = checkPrefetchFlag(); !problem.empty())
    return usageError(problem);
  if (numDevices == 1 && ((!routingProfile.empty() && deviceMemory.empty()) ||
                          microBatches.getNumOccurrences()))
    return usageError("--routing-profile and --micro-batches need --devices "
                      "N with N > 1 (or, for the profile, --device-memory)");
  uint64_t deviceMemoryBytes = 0;
  if (!deviceMemory.empty()) {
    if (!parseDeviceMemory(deviceMemoryBytes))
      return usageError(deviceMemoryError());
    if (emitKind != "plan")
      return usageError("--device-memory tiers a plan's expert weights; it "
                        "needs --emit plan");
  }
  if (numDevices > 1 && emitKind == "mlir")
    return usageError("--devices places experts in the planned model; it "
                      "needs --emit plan or planned-mlir");
  std::optional<moec::plan::ExpertWeightType> expertWeights =
      parseWeightDtype();
  if (!expertWeights)
    return usageError(weightDtypeError());
  if (*expertWeights == moec::plan::ExpertWeightType::I8 && target == "cuda")
    return usageError("--weight-dtype int8 runs on the CPU backend only; "
                      "use bf16 or f16 with --target cuda");
  if (emitKind == "mlir" && weightDtype.getNumOccurrences())
    return usageError("--weight-dtype sets how a plan stores the expert "
                      "weights; it needs --emit plan or planned-mlir");
  if (target != "cpu" && target != "cuda")
    return usageError("--target must be cpu or cuda, not '" + target + "'");
  bool cudaTarget = target == "cuda";
  if (!cudaTarget && (cudaArch.getNumOccurrences() || !ptxOutput.empty() ||
                      !cudaSource.empty()))
    return usageError(
        "--cuda-arch, --ptx-output and --cuda-source need --target cuda");
  if (cudaTarget && emitKind != "plan")
    return usageError("--target cuda needs --emit plan");
  uint32_t cudaArchValue = 0;
  if (cudaTarget) {
    llvm::Expected<uint32_t> arch = moec::cuda::parseCudaArch(cudaArch);
    if (!arch)
      return usageError(llvm::toString(arch.takeError()));
    cudaArchValue = *arch;
  }
  if (std::string problem = checkOutputPaths(); !problem.empty())
    return usageError(problem);

  MLIRContext context;
  configureContext(context);
  onnx_import::ModelDiagnosticHandler diagnostics(&context, llvm::errs(),
                                                  "moec");
  moec::CompileProgress progress(&context, showProgress());
  progress.phase("importing " + modelPath);
  OwningOpRef<ModuleOp> module =
      onnx_import::importOnnxModel(&context, modelPath);
  if (!module || failed(checkBoundNames(*module)))
    return kFailure;
  (*module)->setAttr("moe.max_tokens",
                     Builder(&context).getI64IntegerAttr(maxTokens));

  llvm::StringMap<int64_t> opsBeforeTiers;
  if (!importOnly) {
    llvm::StringMap<int64_t> opsBefore = moec::plan::countOps(*module);
    PassManager pm(&context);
    moec::plan::CompileOptions options;
    options.maxTokens = static_cast<int64_t>(maxTokens);
    options.dimBounds.assign(dimBounds.begin(), dimBounds.end());
    options.simplifyOnly = emitKind == "mlir";
    options.devices = numDevices;
    options.routingProfile = routingProfile;
    options.replicateHot = replicateHot;
    options.microBatches = microBatches;
    options.fuseAttention = target != "cuda";
    options.allNearMisses = verbose;
    moec::plan::buildCompilePipeline(pm, options);
    pm.addInstrumentation(progress.passInstrumentation());
    moec::verify::ValidationOptions validation;
    validation.enabled = !noVerifyRewrites;
    validation.maxTokens = options.maxTokens;
    validation.corrupt = testCorruptRewrite;
    moec::verify::registerRewriteValidator(context, validation);
    if (failed(pm.run(*module)))
      return kFailure;
    progress.done();
    if (!options.simplifyOnly && failed(checkArenaSize(*module)))
      return kFailure;
    if (!options.simplifyOnly)
      moec::warnUnboundedDimensions(*module, modelPath, dimBounds, maxTokens);
    if (verbose)
      moec::plan::printMoeLayers(*module, llvm::errs(), *expertWeights);
    // A tiered plan's report lists its tiers, read back from the plan.
    if (!reportPath.empty() && deviceMemory.empty() &&
        failed(moec::plan::writeReport(*module, opsBefore, reportPath,
                                       *expertWeights)))
      return kFailure;
    opsBeforeTiers = std::move(opsBefore);
  }

  if (emitKind == "plan") {
    FailureOr<SmallVector<func::FuncOp>> devices =
        moec::plan::getDeviceFunctions(*module);
    if (failed(devices))
      return kFailure;
    func::FuncOp func = devices->front();
    moec::cuda::CudaModuleInfo cudaModule;
    moec::plan::PlanFinalizer finalize;
    if (cudaTarget)
      finalize = [&](moert::PlanWriter &writer) {
        return moec::cuda::addCudaKernels(writer, cudaArchValue, func.getLoc(),
                                          &cudaModule);
      };
    FailureOr<moec::plan::TierOptions> tiers =
        getTierOptions(*module, deviceMemoryBytes);
    if (failed(tiers))
      return kFailure;
    FailureOr<moec::plan::PlanFinalizer> withProvenance =
        recordProvenance(/*generation=*/false, std::move(finalize));
    progress.phase("writing " + outputPath);
    if (failed(withProvenance) ||
        failed(moec::plan::emitPlan(*module, outputPath, *withProvenance,
                                    *expertWeights, *tiers)))
      return kFailure;
    FailureOr<std::unique_ptr<moert::Plan>> written = loadWrittenPlan(*module);
    progress.done();
    if (failed(written) ||
        (deviceMemoryBytes &&
         failed(
             reportTiers(*module, **written, opsBeforeTiers, *expertWeights))))
      return kFailure;
    for (auto [path, text] : {std::pair(&ptxOutput, &cudaModule.ptx),
                              std::pair(&cudaSource, &cudaModule.source)})
      if (!path->empty() &&
          failed(moec::plan::writeOutputFile(
              &context, *path, [&](llvm::raw_ostream &os) { os << *text; })))
        return kFailure;
    if (!quiet)
      moec::printCompileSummary(llvm::outs(), outputPath, **written, *module,
                                progress.elapsedSeconds());
    return kSuccess;
  }

  OpPrintingFlags flags;
  // Weights print as hex in the file's resource section: gigabytes of text
  // for a real model. Without --emit-weights the module is printed in local
  // scope, which leaves that section out without reading the weights (the
  // printer's own elision hex-encodes each blob before it drops it, paging in
  // every weight); `dense_resource<name>` still names each one.
  if (!emitWeights)
    flags.useLocalScope();
  if (failed(moec::plan::writeOutputFile(&context, outputPath,
                                         [&](llvm::raw_ostream &os) {
                                           module->print(os, flags);
                                           os << "\n";
                                         })))
    return kFailure;
  return kSuccess;
}

//===----------------------------------------------------------------------===//
// moec compile --max-seq: generation plans
//===----------------------------------------------------------------------===//

/// The report's "generation" entry: the signature, the caches' bytes at
/// max_seq and the prefill's arena.
static llvm::json::Object
getGenerationReport(const moec::plan::GenerationSignature &sig, ModuleOp decode,
                    ModuleOp prefill) {
  // Every device's function has the signature of the model (the caches
  // are not split); device 0's names them.
  FailureOr<SmallVector<func::FuncOp>> decodeFuncs =
      moec::plan::getDeviceFunctions(decode);
  func::FuncOp main = succeeded(decodeFuncs) ? decodeFuncs->front() : nullptr;
  int64_t cacheBytes = 0;
  llvm::json::Array cache;
  for (const moec::plan::CachePairInfo &pair : sig.cache) {
    for (unsigned i = 0; main && i < main.getNumArguments(); ++i) {
      auto name = main.getArgAttrOfType<StringAttr>(i, "moe.name");
      if (!name || name.getValue() != pair.input)
        continue;
      auto type = cast<RankedTensorType>(main.getArgument(i).getType());
      int64_t elements = pair.state ? 1 : static_cast<int64_t>(sig.maxSeq);
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (pair.state || d != pair.axis)
          elements *= type.getDimSize(d);
      cacheBytes += elements * 4;
    }
    cache.push_back(llvm::json::Object{{"input", pair.input},
                                       {"output", pair.output},
                                       {"prefill_output", pair.prefillOutput},
                                       {"layer", pair.layer},
                                       {"axis", pair.axis},
                                       {"state", pair.state}});
  }
  auto nameOrNull = [](const std::string &name) -> llvm::json::Value {
    if (name.empty())
      return nullptr;
    return name;
  };
  llvm::json::Object gen{{"max_seq", sig.maxSeq},
                         {"input_ids", sig.inputIds},
                         {"position_ids", nameOrNull(sig.positionIds)},
                         {"attention_mask", nameOrNull(sig.attentionMask)},
                         {"logits", sig.logits},
                         {"cache", std::move(cache)},
                         {"cache_bytes", cacheBytes}};
  // The largest prefill arena of any device.
  FailureOr<SmallVector<func::FuncOp>> prefillFuncs =
      prefill ? moec::plan::getDeviceFunctions(prefill)
              : FailureOr<SmallVector<func::FuncOp>>(failure());
  if (succeeded(prefillFuncs)) {
    int64_t arenaBytes = -1;
    for (func::FuncOp func : *prefillFuncs)
      if (auto arena = func->getAttrOfType<IntegerAttr>("moe.arena_size"))
        arenaBytes = std::max(arenaBytes, arena.getInt());
    if (arenaBytes >= 0)
      gen["prefill_arena_bytes"] = arenaBytes;
  }
  return gen;
}

static int runGenerationCompile() {
  if (maxSeq < 2 || maxSeq > moert::kMaxDimBound)
    return usageError("--max-seq must be an integer in [2, " +
                      llvm::Twine(moert::kMaxDimBound) + "]");
  if (emitKind != "plan" || outputPath == "-")
    return usageError("--max-seq and --prefill compile a generation plan: "
                      "name it with -o FILE (no --emit)");
  if (maxTokens.getNumOccurrences())
    return usageError("--max-seq bounds a generation plan's sequences; "
                      "drop --max-tokens");
  if (target != "cpu" || importOnly)
    return usageError("generation plans are cpu plans for now: drop "
                      "--target and --import-only");
  if (std::string problem = checkDeviceFlags(); !problem.empty())
    return usageError(problem);
  if (std::string problem = checkPrefetchFlag(); !problem.empty())
    return usageError(problem);
  if (numDevices == 1 && ((!routingProfile.empty() && deviceMemory.empty()) ||
                          microBatches.getNumOccurrences()))
    return usageError("--routing-profile and --micro-batches need --devices "
                      "N with N > 1 (or, for the profile, --device-memory)");
  uint64_t deviceMemoryBytes = 0;
  if (!deviceMemory.empty() && !parseDeviceMemory(deviceMemoryBytes))
    return usageError(deviceMemoryError());
  std::optional<moec::plan::ExpertWeightType> expertWeights =
      parseWeightDtype();
  if (!expertWeights)
    return usageError(weightDtypeError());
  if (std::string problem = checkBoundFlags(); !problem.empty())
    return usageError(problem);
  if (std::string problem = checkOutputPaths(); !problem.empty())
    return usageError(problem);

  MLIRContext context;
  configureContext(context);
  onnx_import::ModelDiagnosticHandler diagnostics(&context, llvm::errs(),
                                                  "moec");
  moec::CompileProgress progress(&context, showProgress());
  progress.phase("importing " + modelPath);
  OwningOpRef<ModuleOp> decode =
      onnx_import::importOnnxModel(&context, modelPath);
  if (!decode)
    return kFailure;
  OwningOpRef<ModuleOp> prefill;
  if (!prefillPath.empty()) {
    prefill = onnx_import::importOnnxModel(&context, prefillPath);
    if (!prefill)
      return kFailure;
  }
  moec::plan::specializeForGeneration(*decode);
  if (prefill)
    moec::plan::specializeForGeneration(*prefill);
  FailureOr<moec::plan::GenerationSignature> sig =
      moec::plan::findGenerationSignature(*decode, modelPath,
                                          prefill ? *prefill : ModuleOp(),
                                          prefillPath, maxSeq);
  if (failed(sig))
    return kFailure;
  sig->eosIds = folderEosIds;

  moec::verify::ValidationOptions validation;
  validation.enabled = !noVerifyRewrites;
  validation.maxTokens = static_cast<int64_t>(maxSeq - 1);
  validation.corrupt = testCorruptRewrite;
  moec::verify::registerRewriteValidator(context, validation);
  llvm::StringMap<int64_t> opsBefore = moec::plan::countOps(*decode);
  for (auto [module, isPrefill] :
       {std::pair(decode.get(), false), std::pair(prefill.get(), true)}) {
    if (!module)
      continue;
    // Every sequence dimension is bounded by max_seq - 1 (the decode's
    // past, the prefill's prompt); its present grows to max_seq.
    module->setAttr("moe.max_tokens", Builder(&context).getI64IntegerAttr(
                                          static_cast<int64_t>(maxSeq - 1)));
    moec::plan::CompileOptions options;
    options.maxTokens = static_cast<int64_t>(maxSeq - 1);
    options.dimBounds = moec::plan::getGenerationBounds(*sig, isPrefill);
    // Both schedules are placed alike (the placement depends on the
    // weights and the profile only), so that device d serves the same
    // experts in the prefill as in the decode and their shards are shared.
    options.devices = numDevices;
    options.routingProfile = routingProfile;
    options.replicateHot = replicateHot;
    options.microBatches = microBatches;
    for (const std::string &bound : dimBounds)
      if (llvm::none_of(options.dimBounds, [&](const std::string &own) {
            return StringRef(own).split('=').first ==
                   StringRef(bound).split('=').first;
          }))
        options.dimBounds.push_back(bound);
    options.fuseAttention = target != "cuda";
    options.allNearMisses = verbose;
    PassManager pm(&context);
    moec::plan::buildCompilePipeline(pm, options);
    pm.addInstrumentation(progress.passInstrumentation());
    bool compiled = succeeded(pm.run(module));
    progress.done();
    if (!compiled || failed(checkArenaSize(module)))
      return kFailure;
  }
  if (verbose)
    moec::plan::printMoeLayers(*decode, llvm::errs(), *expertWeights);
  llvm::json::Object generationReport{
      {"generation",
       getGenerationReport(*sig, *decode, prefill ? *prefill : ModuleOp())}};
  // A tiered plan's report lists its tiers, read back from the plan.
  if (!reportPath.empty() && !deviceMemoryBytes &&
      failed(moec::plan::writeReport(*decode, opsBefore, reportPath,
                                     *expertWeights, generationReport)))
    return kFailure;
  FailureOr<moec::plan::TierOptions> tiers =
      getTierOptions(*decode, deviceMemoryBytes);
  if (failed(tiers))
    return kFailure;
  FailureOr<moec::plan::PlanFinalizer> withProvenance =
      recordProvenance(/*generation=*/true);
  progress.phase("writing " + outputPath);
  if (failed(withProvenance) ||
      failed(moec::plan::emitGenerationPlan(
          *decode, prefill ? *prefill : ModuleOp(), *sig, outputPath,
          *withProvenance, *expertWeights, *tiers)))
    return kFailure;
  FailureOr<std::unique_ptr<moert::Plan>> written = loadWrittenPlan(*decode);
  progress.done();
  if (failed(written) ||
      (deviceMemoryBytes &&
       failed(reportTiers(*decode, **written, opsBefore, *expertWeights,
                          std::move(generationReport)))))
    return kFailure;
  // A builder folder's tokenizer goes beside the plan, for serving.
  std::string error;
  if (genaiFolder &&
      !moec::copyTokenizerFiles(*genaiFolder, outputPath, error)) {
    llvm::errs() << "moec: error: " << error << "\n";
    return kFailure;
  }
  if (!quiet) {
    moec::printCompileSummary(llvm::outs(), outputPath, **written, *decode,
                              progress.elapsedSeconds());
    if (genaiFolder && !genaiFolder->tokenizerFiles.empty())
      llvm::outs() << "moec: tokenizer files in "
                   << moec::getTokenizerDir(outputPath) << ": "
                   << llvm::join(genaiFolder->tokenizerFiles, ", ") << "\n";
  }
  return kSuccess;
}

//===----------------------------------------------------------------------===//
// moec inspect
//===----------------------------------------------------------------------===//

static int runInspect() {
  // The runtime's loader validates the whole file first, so a corrupt plan is
  // reported instead of printed.
  absl::StatusOr<std::unique_ptr<moert::Plan>> plan =
      moert::Plan::load(planPath);
  if (!plan.ok()) {
    llvm::errs() << "moec: error: " << std::string(plan.status().message())
                 << "\n";
    return kFailure;
  }
  llvm::outs() << (json ? moert::describePlanJson(**plan)
                        : moert::describePlanText(**plan));
  return kSuccess;
}

int main(int argc, char **argv) {
  // `moec verify` is the Python accuracy check (onnxruntime): hand it the
  // arguments as they are.
  if (argc >= 2 && llvm::StringRef(argv[1]) == "verify")
    return moec::execVerifyTool(
        "moec", std::vector<std::string>(argv + 2, argv + argc));
  llvm::InitLLVM initLLVM(argc, argv);
  moec::installFatalErrorHandlers("moec");
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << moert::getVersionLine("moec") << ", LLVM/MLIR " LLVM_VERSION_STRING
       << "\n";
  });
  cl::HideUnrelatedOptions(moecCategory);
  if (argc >= 2 && llvm::is_contained(
                       std::initializer_list<llvm::StringRef>{
                           "check", "ops", "compile", "inspect"},
                       argv[1]))
    commandName = argv[1];
  // cl's own wording (and its "Try: ... --help") becomes moec's style.
  std::string clErrors;
  if (!moec::parseCommandLine(
          argc, argv,
          "moec: ahead-of-time compiler for Mixture-of-Experts models\n",
          clErrors))
    return usageError(moec::rewordCommandLineError(clErrors, commandName));
  if (checkCommand)
    return runCheck();
  if (opsCommand)
    return runOps();
  if (compileCommand)
    return runCompile();
  if (inspectCommand)
    return runInspect();
  return usageError("no command given (check, compile, inspect, ops or "
                    "verify)");
}
