//===- Compile.cpp - moec compile -----------------------------------------===//
//
//   moec compile MODEL -o OUT [--emit plan|mlir|planned-mlir] ...
//   moec compile DECODE.onnx [--prefill PREFILL.onnx] --max-seq S -o OUT
//   moec compile MODEL_DIR -o OUT      (an onnxruntime-genai builder folder)
//
// Imports, runs the pipeline, checks the planned arena against the plan's
// and this machine's limits, writes the plan and loads it back as moe-run
// will, so that a plan the runtime refuses is an error here.
//
//===----------------------------------------------------------------------===//

#include "Compile.h"

#include "CompileSummary.h"
#include "GenaiFolder.h"
#include "MultimodalFolder.h"
#include "compiler/InitAll.h"
#include "compiler/cuda/CudaTarget.h"
#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Import.h"
#include "compiler/plan/CompilePipeline.h"
#include "compiler/plan/DenseWeights.h"
#include "compiler/plan/Generation.h"
#include "compiler/plan/Int4Weights.h"
#include "compiler/plan/PlanEmitter.h"
#include "compiler/plan/Provenance.h"
#include "compiler/verify/RewriteValidator.h"
#include "dialects/moe/MoeOps.h"
#include "format/file_io.h"
#include "format/format.h"
#include "format/plan_writer.h"
#include "mlir/IR/Diagnostics.h"
#include "observe/inspect.h"
#include "passes/RoutingProfile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace moec;

FailureOr<moec::plan::PlanFinalizer>
moec::recordProvenance(const CompileFlags &flags,
                       moec::plan::PlanFinalizer next) {
  FailureOr<moert::ProvenanceDesc> provenance =
      moec::plan::buildProvenance(flags.input.model, flags.input.prefill,
                                  flags.getProvenanceFlags(), llvm::errs());
  if (failed(provenance))
    return failure();
  return moec::plan::PlanFinalizer(
      [provenance = std::move(*provenance),
       next = std::move(next)](moert::PlanWriter &writer) {
        writer.setProvenance(provenance);
        return next ? next(writer) : success();
      });
}

/// Creates a context with moec's dialects whose diagnostics print as
/// `<file>: error: <subject>: <message>`.
void moec::configureContext(MLIRContext &context) {
  DialectRegistry registry;
  moec::registerAllDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  // One line per error: the op a verifier complains about is named by its
  // location already.
  context.printOpOnDiagnostic(false);
}

//===----------------------------------------------------------------------===//
// moec compile
//===----------------------------------------------------------------------===//

/// Checks that every --bound names a dimension of the model's inputs (ONNX
/// dim_param): a misspelt name would otherwise leave that dimension at
/// --max-tokens without a word.
static LogicalResult checkBoundNames(ModuleOp module,
                                     const CompileFlags &flags) {
  llvm::SetVector<StringRef> names;
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto params = func.getArgAttrOfType<ArrayAttr>(i, "moe.dim_params"))
        for (auto param : params.getAsRange<StringAttr>())
          if (!param.getValue().empty())
            names.insert(param.getValue());
  for (const std::string &bound : flags.shapes.dimBounds) {
    StringRef name = StringRef(bound).split('=').first;
    if (names.contains(name))
      continue;
    InFlightDiagnostic diag = emitError(
        onnx_import::getModelLoc(module.getContext(), flags.input.model));
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

LogicalResult moec::checkArenaSize(ModuleOp module, const CompileFlags &flags) {
  uint64_t memory = moert::physicalMemoryBytes();
  FailureOr<SmallVector<func::FuncOp>> funcs =
      moec::plan::getDeviceFunctions(module);
  if (failed(funcs))
    return failure();
  llvm::StringSet<> given;
  for (const std::string &bound : flags.shapes.dimBounds)
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
    Location loc =
        onnx_import::getModelLoc(module.getContext(), flags.input.model);
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

/// Marks the dense matrices that stay f32 [K, N] MatMul operands: those
/// --keep-f32 names, and every one for the CUDA target (which has no Linear
/// step); then, with --weight-dtype int4, quantizes the others, says how
/// many with --verbose and adds it to `report`.
static LogicalResult keepWeightsWide(ArrayRef<ModuleOp> modules,
                                     const CompileFlags &flags,
                                     llvm::json::Object &report) {
  if (flags.weights.int8Activations && !flags.weights.isInt4()) {
    // The model's own block-quantized weights (MatMulNBits, QMoE).
    int64_t marked = moec::plan::markInt8Activations(modules);
    if (!marked) {
      llvm::errs() << "moec: error: --int8-activations quantizes the "
                      "activations of products with int4 or int8 weights, "
                      "but the model has none (MatMulNBits, QMoE); use "
                      "--weight-dtype int4 to make them\n";
      return failure();
    }
    if (flags.report.verbose)
      llvm::errs() << llvm::formatv(
          "moec: int8 activations for {0} block-quantized matrices\n", marked);
    report["int8_activations"] = marked;
  }
  // The CUDA target has no Linear step: its dense matrices stay [K, N]
  // MatMul operands, in f32 plans too.
  if (failed(moec::plan::keepDenseWeightsWide(modules, flags.weights.keepF32,
                                              flags.target.isCuda())))
    return failure();
  if (!flags.weights.narrows())
    return success();
  if (!flags.weights.isInt4())
    return success();
  moec::plan::Int4Options int4;
  int4.int8Activations = flags.weights.int8Activations;
  FailureOr<moec::plan::Int4Summary> summary =
      moec::plan::quantizeWeightsToInt4(modules, int4);
  if (failed(summary))
    return failure();
  if (flags.report.verbose)
    llvm::errs() << llvm::formatv(
        "moec: int4 in blocks of {0} ({1} activations): {2} dense matrices, "
        "{3} routed expert networks\n",
        int4.blockSize, int4.int8Activations ? "int8" : "f32",
        summary->denseMatrices, summary->expertNetworks);
  report["expert_weight_dtype"] = "int4";
  report["int4"] =
      llvm::json::Object{{"block_size", int4.blockSize},
                         {"int8_activations", int4.int8Activations},
                         {"dense_matrices", summary->denseMatrices},
                         {"expert_networks", summary->expertNetworks}};
  return success();
}

FailureOr<moec::plan::TierOptions>
moec::getTierOptions(ModuleOp module, const CompileFlags &flags,
                     uint64_t bytes) {
  moec::plan::TierOptions tiers;
  tiers.deviceMemory = bytes;
  tiers.prefetch = flags.tiers.prefetch;
  if (bytes && !flags.parallel.routingProfile.empty()) {
    FailureOr<moec::RoutingProfile> profile =
        moec::readRoutingProfile(module, flags.parallel.routingProfile);
    if (failed(profile))
      return failure();
    for (const auto &layer : *profile)
      tiers.loads.emplace_back(layer.begin(), layer.end());
  }
  return tiers;
}

FailureOr<std::unique_ptr<moert::Plan>>
moec::loadWrittenPlan(ModuleOp module, const std::string &outputPath) {
  moert::LoadOptions load;
  load.verifyWeightChecksums = false; // Written just now.
  load.weightPages = moert::LoadOptions::WeightPages::Mapped;
  absl::StatusOr<std::unique_ptr<moert::Plan>> plan =
      moert::Plan::load(outputPath, load);
  if (plan.ok())
    return std::move(*plan);
  llvm::sys::fs::remove(outputPath);
  return module.emitError("the runtime cannot run this model, so no plan is "
                          "written: ")
         << std::string(plan.status().message());
}

LogicalResult moec::reportTiers(ModuleOp module, const CompileFlags &flags,
                                const moert::Plan &plan,
                                const llvm::StringMap<int64_t> &opsBefore,
                                moec::plan::ExpertWeightType expertWeights,
                                llvm::json::Object extra) {
  llvm::json::Array devices;
  for (int d = 0; d < plan.numDevices(); ++d) {
    absl::StatusOr<moert::ExpertTiersDesc> tiers = plan.expertTiers(d);
    if (!tiers.ok())
      return module.emitError(std::string(tiers.status().message()));
    // A policy that reads nothing ahead is a mistake the user should hear
    // of now, not find in the stats of every run.
    if (tiers->prefetch != "none" && !tiers->layersReadAhead) {
      llvm::sys::fs::remove(flags.output.output);
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
    if (flags.report.verbose)
      llvm::errs() << "moec: device " << d << " "
                   << moert::describeTiersText(*tiers, "");
    llvm::Expected<llvm::json::Value> json =
        llvm::json::parse(moert::describeTiersJson(*tiers));
    if (!json)
      return module.emitError(llvm::toString(json.takeError()));
    devices.push_back(std::move(*json));
  }
  if (flags.report.report.empty())
    return success();
  extra["tiers"] = std::move(devices);
  return moec::plan::writeReport(module, opsBefore, flags.report.report,
                                 expertWeights, std::move(extra));
}

/// The longest sequence a builder folder's plan takes unless --max-seq says
/// otherwise: the caches are sized for it, and exports declare their whole
/// context (128K tokens for gpt-oss).
constexpr uint64_t kDefaultFolderMaxSeq = 4096;

namespace {
/// A configured context (configureContext), built before anything that
/// registers on it.
struct ConfiguredContext {
  ConfiguredContext() { moec::configureContext(context); }
  MLIRContext context;
};

/// What every compile flow sets up first: the configured context, the
/// diagnostics that name the model, and the progress phases.
struct CompileSession : ConfiguredContext {
  explicit CompileSession(bool showProgress)
      : diagnostics(&context, llvm::errs(), "moec"),
        progress(&context, showProgress) {}
  onnx_import::ModelDiagnosticHandler diagnostics;
  CompileProgress progress;
};
} // namespace

static int runGenerationCompile(const CompileFlags &flags);

int moec::runCompile(CompileFlags flags) {
  if (isMultimodalFolder(flags.input.model)) {
    // A vision-language export: its graphs compile into one plan.
    MultimodalFolder folder;
    std::string error;
    if (!readMultimodalFolder(flags.input.model, folder, error)) {
      llvm::errs() << "moec: error: " << error << "\n";
      return kFailure;
    }
    if (!flags.input.prefill.empty())
      return usageError("--prefill: a vision-language folder names its "
                        "graphs itself (language_model.onnx is the prefill)");
    if (!flags.shapes.maxSeqGiven)
      flags.shapes.maxSeq = kDefaultFolderMaxSeq;
    flags.input.model = folder.decode;
    flags.input.prefill = folder.languageModel;
    flags.generation = true;
    if (std::string problem = flags.verify(); !problem.empty())
      return usageError(problem);
    return runMultimodalCompile(flags, folder);
  }
  std::optional<GenaiFolder> genai;
  if (isGenaiFolder(flags.input.model)) {
    genai.emplace();
    std::string error;
    if (!readGenaiFolder(flags.input.model, *genai, error)) {
      llvm::errs() << "moec: error: " << error << "\n";
      return kFailure;
    }
  }
  if (genai && genai->multimodal) {
    // onnxruntime-genai's vision pipeline: its vision, embedding and decoder
    // graphs compile into one multimodal plan.
    MultimodalFolder folder;
    std::string error;
    if (!readGenaiMultimodalFolder(*genai, folder, error)) {
      llvm::errs() << "moec: error: " << error << "\n";
      return kFailure;
    }
    if (!flags.input.prefill.empty())
      return usageError("--prefill: a genai folder's decoder runs the prompt "
                        "itself");
    if (!flags.shapes.maxSeqGiven)
      flags.shapes.maxSeq = std::min(genai->maxLength, kDefaultFolderMaxSeq);
    flags.input.model = folder.decode;
    flags.generation = true;
    if (std::string problem = flags.verify(); !problem.empty())
      return usageError(problem);
    return runMultimodalCompile(flags, folder);
  }
  if (!flags.shapes.fixedDims.empty())
    return usageError("--dim fixes input dimensions of a vision-language "
                      "folder's graphs (moec compile DIR --max-seq S)");
  if (genai) {
    // An onnxruntime-genai folder is a generation model: its decoder, with
    // the sequence length its config gives (at most the default).
    GenaiFolder &folder = *genai;
    flags.input.model = folder.modelPath;
    if (!flags.shapes.maxSeqGiven)
      flags.shapes.maxSeq = std::min(folder.maxLength, kDefaultFolderMaxSeq);
    flags.input.folder = std::move(folder);
    flags.generation = true;
  }
  if (std::string problem = flags.verify(); !problem.empty())
    return usageError(problem);
  if (flags.generation)
    return runGenerationCompile(flags);

  const std::string &modelPath = flags.input.model;
  const std::string &outputPath = flags.output.output;
  const std::string &emitKind = flags.output.emit;
  const ShapeOptions &shapes = flags.shapes;
  const ParallelOptions &parallel = flags.parallel;
  const ReportOptions &report = flags.report;
  bool cudaTarget = flags.target.isCuda();
  uint32_t cudaArchValue = cudaTarget ? flags.target.getCudaArch() : 0;
  uint64_t deviceMemoryBytes = *flags.tiers.getDeviceMemoryBytes();
  plan::ExpertWeightType expertWeights = *flags.weights.getExpertWeightType();

  CompileSession session(report.showProgress());
  MLIRContext &context = session.context;
  CompileProgress &progress = session.progress;
  progress.phase("importing " + modelPath);
  onnx_import::ImportOptions form;
  form.widenFloat16 = flags.input.widenFloat16;
  OwningOpRef<ModuleOp> module =
      onnx_import::importOnnxModel(&context, modelPath, form);
  if (!module || failed(checkBoundNames(*module, flags)))
    return kFailure;
  (*module)->setAttr("moe.max_tokens",
                     Builder(&context).getI64IntegerAttr(shapes.maxTokens));

  llvm::StringMap<int64_t> opsBeforeTiers;
  if (!flags.output.importOnly) {
    llvm::StringMap<int64_t> opsBefore = plan::countOps(*module);
    PassManager pm(&context);
    plan::CompileOptions options;
    options.maxTokens = static_cast<int64_t>(shapes.maxTokens);
    options.dimBounds = shapes.dimBounds;
    options.simplifyOnly = emitKind == "mlir";
    options.devices = parallel.devices;
    options.routingProfile = parallel.routingProfile;
    options.replicateHot = parallel.replicateHot;
    options.microBatches = parallel.microBatches;
    options.fuseAttention = !cudaTarget;
    options.allNearMisses = report.verbose;
    plan::buildCompilePipeline(pm, options);
    pm.addInstrumentation(progress.passInstrumentation());
    moec::verify::ValidationOptions validation;
    validation.enabled = flags.validation.enabled;
    validation.maxTokens = options.maxTokens;
    validation.corrupt = flags.validation.testCorruptRewrite;
    moec::verify::registerRewriteValidator(context, validation);
    if (failed(pm.run(*module)))
      return kFailure;
    moec::verify::releaseRewriteValidatorMemory(context);
    progress.done();
    llvm::json::Object weightReport;
    if (!options.simplifyOnly &&
        failed(keepWeightsWide({*module}, flags, weightReport)))
      return kFailure;
    if (!options.simplifyOnly && failed(checkArenaSize(*module, flags)))
      return kFailure;
    if (!options.simplifyOnly)
      warnUnboundedDimensions(*module, modelPath, shapes.dimBounds,
                              shapes.maxTokens);
    if (report.verbose)
      plan::printMoeLayers(*module, llvm::errs(), expertWeights);
    // A tiered plan's report lists its tiers, read back from the plan.
    if (!report.report.empty() && flags.tiers.deviceMemory.empty() &&
        failed(plan::writeReport(*module, opsBefore, report.report,
                                 expertWeights, std::move(weightReport))))
      return kFailure;
    opsBeforeTiers = std::move(opsBefore);
  }

  if (emitKind == "plan") {
    FailureOr<SmallVector<func::FuncOp>> devices =
        plan::getDeviceFunctions(*module);
    if (failed(devices))
      return kFailure;
    func::FuncOp func = devices->front();
    moec::cuda::CudaModuleInfo cudaModule;
    plan::PlanFinalizer finalize;
    if (cudaTarget)
      finalize = [&](moert::PlanWriter &writer) {
        return moec::cuda::addCudaKernels(writer, cudaArchValue, func.getLoc(),
                                          &cudaModule);
      };
    FailureOr<plan::TierOptions> tiers =
        getTierOptions(*module, flags, deviceMemoryBytes);
    if (failed(tiers))
      return kFailure;
    FailureOr<plan::PlanFinalizer> withProvenance =
        recordProvenance(flags, std::move(finalize));
    progress.phase("writing " + outputPath);
    if (failed(withProvenance) ||
        failed(plan::emitPlan(*module, outputPath, *withProvenance,
                              expertWeights, *tiers)))
      return kFailure;
    FailureOr<std::unique_ptr<moert::Plan>> written =
        loadWrittenPlan(*module, outputPath);
    progress.done();
    if (failed(written) || (deviceMemoryBytes &&
                            failed(reportTiers(*module, flags, **written,
                                               opsBeforeTiers, expertWeights))))
      return kFailure;
    for (auto [path, text] :
         {std::pair(&flags.target.ptxOutput, &cudaModule.ptx),
          std::pair(&flags.target.cudaSource, &cudaModule.source)})
      if (!path->empty() &&
          failed(plan::writeOutputFile(
              &context, *path, [&](llvm::raw_ostream &os) { os << *text; })))
        return kFailure;
    if (!report.quiet)
      printCompileSummary(llvm::outs(), outputPath, **written, *module,
                          progress.elapsedSeconds());
    return kSuccess;
  }

  OpPrintingFlags printing;
  // Weights print as hex in the file's resource section: gigabytes of text
  // for a real model. Without --emit-weights the module is printed in local
  // scope, which leaves that section out without reading the weights (the
  // printer's own elision hex-encodes each blob before it drops it, paging in
  // every weight); `dense_resource<name>` still names each one.
  if (!flags.output.emitWeights)
    printing.useLocalScope();
  if (failed(plan::writeOutputFile(&context, outputPath,
                                   [&](llvm::raw_ostream &os) {
                                     module->print(os, printing);
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

/// The prefill schedule of a one-graph generation model whose attention
/// reads its positions from an input: the graph imported as a first prompt
/// (onnx_import::ImportOptions::firstPrompt). None for a graph with state
/// caches other than recurrences' states, which start from zeros in a first
/// prompt (another state, such as a sliding window's cache, makes the
/// prompt run through the decode graph, which updates it), or one that
/// form cannot express; the latter says why with --verbose.
static OwningOpRef<ModuleOp>
importFirstPrompt(MLIRContext &context, StringRef modelPath, ModuleOp decode,
                  const plan::GenerationSignature &alone,
                  const ReportOptions &report, bool widenFloat16) {
  auto main = decode.lookupSymbol<func::FuncOp>("main");
  for (const plan::CachePairInfo &pair : alone.cache) {
    if (!pair.state)
      continue;
    for (unsigned i = 0; main && i < main.getNumArguments(); ++i) {
      if (plan::getArgName(main, i) != pair.input)
        continue;
      for (OpOperand &use : main.getArgument(i).getUses()) {
        Operation *user = use.getOwner();
        bool recurrence =
            (isa<moe::CausalConvOp>(user) && use.getOperandNumber() == 2) ||
            (isa<moe::GatedDeltaRuleOp>(user) && use.getOperandNumber() == 3);
        if (!recurrence)
          return nullptr;
      }
    }
  }
  std::string why;
  OwningOpRef<ModuleOp> prefill;
  {
    ScopedDiagnosticHandler capture(&context, [&](Diagnostic &diag) {
      if (why.empty())
        why = onnx_import::describeLoc(diag.getLocation()) + diag.str();
      return success();
    });
    onnx_import::ImportOptions form;
    form.firstPrompt = true;
    form.widenFloat16 = widenFloat16;
    prefill = onnx_import::importOnnxModel(&context, modelPath, form);
  }
  // A graph whose own position_ids drive a rotary outside attention may
  // still read its pasts (no GroupQueryAttention to run as a first prompt).
  auto first =
      prefill ? prefill->lookupSymbol<func::FuncOp>("main") : func::FuncOp();
  for (unsigned i = 0; first && i < first.getNumArguments(); ++i) {
    std::string name = plan::getArgName(first, i);
    if (name == alone.inputIds || name == alone.positionIds)
      continue;
    why = modelPath.str() + ": a first prompt still reads input '" + name + "'";
    prefill = nullptr;
    break;
  }
  if (!prefill && report.verbose)
    llvm::errs() << "moec: note: no prefill schedule: " << why << "\n";
  return prefill;
}

static int runGenerationCompile(const CompileFlags &flags) {
  const std::string &modelPath = flags.input.model;
  const std::string &prefillPath = flags.input.prefill;
  const std::string &outputPath = flags.output.output;
  const ShapeOptions &shapes = flags.shapes;
  const ParallelOptions &parallel = flags.parallel;
  const ReportOptions &report = flags.report;
  const std::optional<GenaiFolder> &genaiFolder = flags.input.folder;
  uint64_t maxSeq = shapes.maxSeq;
  uint64_t deviceMemoryBytes = *flags.tiers.getDeviceMemoryBytes();
  plan::ExpertWeightType expertWeights = *flags.weights.getExpertWeightType();

  CompileSession session(report.showProgress());
  MLIRContext &context = session.context;
  CompileProgress &progress = session.progress;
  progress.phase("importing " + modelPath);
  // One graph for prompt and decode (an onnxruntime-genai export): its
  // GroupQueryAttention reads positions from an input, so that the same
  // graph imported as a first prompt can be the prefill schedule.
  onnx_import::ImportOptions decodeForm;
  decodeForm.positionInput = prefillPath.empty();
  decodeForm.widenFloat16 = flags.input.widenFloat16;
  OwningOpRef<ModuleOp> decode =
      onnx_import::importOnnxModel(&context, modelPath, decodeForm);
  if (!decode)
    return kFailure;
  OwningOpRef<ModuleOp> prefill;
  if (!prefillPath.empty()) {
    onnx_import::ImportOptions prefillForm;
    prefillForm.widenFloat16 = flags.input.widenFloat16;
    prefill = onnx_import::importOnnxModel(&context, prefillPath, prefillForm);
    if (!prefill)
      return kFailure;
  }
  plan::specializeForGeneration(*decode);
  std::string prefillSource = prefillPath;
  plan::GenerationSearch search;
  // Or with positions of its own, which its rotary reads (Qwen3.5's M-RoPE).
  auto hasOwnPositions = [&] {
    auto main = decode->lookupSymbol<func::FuncOp>("main");
    for (unsigned i = 0; main && i < main.getNumArguments(); ++i)
      if (plan::getArgName(main, i) == "position_ids")
        return true;
    return false;
  };
  if (!prefill && ((*decode)->hasAttr(onnx_import::kPositionsFromInputAttr) ||
                   hasOwnPositions())) {
    FailureOr<plan::GenerationSignature> alone = plan::findGenerationSignature(
        *decode, modelPath, ModuleOp(), "", maxSeq);
    if (failed(alone))
      return kFailure;
    prefill = importFirstPrompt(context, modelPath, *decode, *alone, report,
                                flags.input.widenFloat16);
    prefillSource = modelPath + " (as a first prompt)";
    search.firstPromptPrefill = true;
  }
  if (prefill)
    plan::specializeForGeneration(*prefill);
  FailureOr<plan::GenerationSignature> sig = plan::findGenerationSignature(
      *decode, modelPath, prefill ? *prefill : ModuleOp(), prefillSource,
      maxSeq, search);
  if (failed(sig))
    return kFailure;
  if (genaiFolder)
    sig->eosIds = genaiFolder->eosTokenIds;

  moec::verify::ValidationOptions validation;
  validation.enabled = flags.validation.enabled;
  validation.maxTokens = static_cast<int64_t>(maxSeq - 1);
  validation.corrupt = flags.validation.testCorruptRewrite;
  moec::verify::registerRewriteValidator(context, validation);
  llvm::StringMap<int64_t> opsBefore = plan::countOps(*decode);
  for (auto [module, isPrefill] :
       {std::pair(decode.get(), false), std::pair(prefill.get(), true)}) {
    if (!module)
      continue;
    // Every sequence dimension is bounded by max_seq - 1 (the decode's
    // past, the prefill's prompt); its present grows to max_seq.
    module->setAttr("moe.max_tokens", Builder(&context).getI64IntegerAttr(
                                          static_cast<int64_t>(maxSeq - 1)));
    plan::CompileOptions options;
    options.maxTokens = static_cast<int64_t>(maxSeq - 1);
    options.dimBounds = plan::getGenerationBounds(*sig, isPrefill);
    // Both schedules are placed alike (the placement depends on the
    // weights and the profile only), so that device d serves the same
    // experts in the prefill as in the decode and their shards are shared.
    options.devices = parallel.devices;
    options.routingProfile = parallel.routingProfile;
    options.replicateHot = parallel.replicateHot;
    options.microBatches = parallel.microBatches;
    for (const std::string &bound : shapes.dimBounds)
      if (llvm::none_of(options.dimBounds, [&](const std::string &own) {
            return StringRef(own).split('=').first ==
                   StringRef(bound).split('=').first;
          }))
        options.dimBounds.push_back(bound);
    options.fuseAttention = !flags.target.isCuda();
    options.allNearMisses = report.verbose;
    if (isPrefill) {
      options.batchRowInputs.push_back(sig->inputIds);
      if (!sig->positionIds.empty())
        options.batchRowInputs.push_back(sig->positionIds);
    }
    PassManager pm(&context);
    plan::buildCompilePipeline(pm, options);
    pm.addInstrumentation(progress.passInstrumentation());
    bool compiled = succeeded(pm.run(module));
    progress.done();
    if (!compiled || failed(checkArenaSize(module, flags)))
      return kFailure;
  }
  moec::verify::releaseRewriteValidatorMemory(context);
  SmallVector<ModuleOp, 2> modules = {*decode};
  if (prefill)
    modules.push_back(*prefill);
  llvm::json::Object generationReport;
  if (failed(keepWeightsWide(modules, flags, generationReport)))
    return kFailure;
  if (report.verbose)
    plan::printMoeLayers(*decode, llvm::errs(), expertWeights);
  generationReport["generation"] =
      getGenerationReport(*sig, *decode, prefill ? *prefill : ModuleOp());
  // A tiered plan's report lists its tiers, read back from the plan.
  if (!report.report.empty() && !deviceMemoryBytes &&
      failed(plan::writeReport(*decode, opsBefore, report.report, expertWeights,
                               generationReport)))
    return kFailure;
  FailureOr<plan::TierOptions> tiers =
      getTierOptions(*decode, flags, deviceMemoryBytes);
  if (failed(tiers))
    return kFailure;
  FailureOr<plan::PlanFinalizer> withProvenance = recordProvenance(flags);
  progress.phase("writing " + outputPath);
  if (failed(withProvenance) ||
      failed(plan::emitGenerationPlan(*decode, prefill ? *prefill : ModuleOp(),
                                      *sig, outputPath, *withProvenance,
                                      expertWeights, *tiers)))
    return kFailure;
  FailureOr<std::unique_ptr<moert::Plan>> written =
      loadWrittenPlan(*decode, outputPath);
  progress.done();
  if (failed(written) ||
      (deviceMemoryBytes &&
       failed(reportTiers(*decode, flags, **written, opsBefore, expertWeights,
                          std::move(generationReport)))))
    return kFailure;
  // A builder folder's tokenizer goes beside the plan, for serving.
  std::string error;
  if (genaiFolder && !copyTokenizerFiles(*genaiFolder, outputPath, error)) {
    llvm::errs() << "moec: error: " << error << "\n";
    return kFailure;
  }
  if (!report.quiet) {
    printCompileSummary(llvm::outs(), outputPath, **written, *decode,
                        progress.elapsedSeconds());
    if (genaiFolder && !genaiFolder->tokenizerFiles.empty())
      llvm::outs() << "moec: tokenizer files in " << getTokenizerDir(outputPath)
                   << ": " << llvm::join(genaiFolder->tokenizerFiles, ", ")
                   << "\n";
  }
  return kSuccess;
}
