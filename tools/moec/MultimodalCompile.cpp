//===- MultimodalCompile.cpp - moec compile of a vision-language folder ---===//
//
//   moec compile DIR --max-seq S -o mm.plan
//
// DIR as transformers' exporters leave a vision-language model
// (MultimodalFolder.h): the decode graph compiles as a generation plan's
// decode schedule, the vision encoder, embedding, language model and head
// each as a stage of the plan's Multimodal table, with the feeds
// compiler/plan/Multimodal.h finds (docs/plan-format.md, "Multimodal
// plans"). An onnxruntime-genai folder's vision, embedding and decoder map
// to the same roles, its one decoder serving as the prefill (imported as a
// first prompt) and, behind the embedding's table, the decode schedule.
//
//===----------------------------------------------------------------------===//

#include "Compile.h"

#include "CompileSummary.h"
#include "MultimodalFolder.h"
#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Import.h"
#include "compiler/plan/CompilePipeline.h"
#include "compiler/plan/DenseWeights.h"
#include "compiler/plan/Generation.h"
#include "compiler/plan/Int4Weights.h"
#include "compiler/plan/Multimodal.h"
#include "compiler/verify/RewriteValidator.h"
#include "moert/moert.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace moec;
namespace fb = moert::fb;

namespace {

/// Compiles `module` with every dynamic dimension bounded by `maxTokens`
/// unless `bounds` (NAME=N) or the user's --bound say otherwise. With
/// `expertParallel` (the decode graph and the language model), for the
/// devices and placement of the user's --devices and its flags, alike for
/// both, so that device d serves the same experts in each.
LogicalResult compileGraph(MLIRContext &context, ModuleOp module,
                           const CompileFlags &flags, int64_t maxTokens,
                           std::vector<std::string> bounds,
                           CompileProgress &progress,
                           bool expertParallel = false) {
  module->setAttr("moe.max_tokens",
                  Builder(&context).getI64IntegerAttr(maxTokens));
  plan::CompileOptions options;
  options.maxTokens = maxTokens;
  options.dimBounds = std::move(bounds);
  for (const std::string &bound : flags.shapes.dimBounds)
    if (llvm::none_of(options.dimBounds, [&](const std::string &own) {
          return StringRef(own).split('=').first ==
                 StringRef(bound).split('=').first;
        }))
      options.dimBounds.push_back(bound);
  options.fuseAttention = true;
  options.allNearMisses = flags.report.verbose;
  if (expertParallel) {
    options.devices = flags.parallel.devices;
    options.routingProfile = flags.parallel.routingProfile;
    options.replicateHot = flags.parallel.replicateHot;
    options.microBatches = flags.parallel.microBatches;
  }
  PassManager pm(&context);
  plan::buildCompilePipeline(pm, options);
  pm.addInstrumentation(progress.passInstrumentation());
  bool compiled = succeeded(pm.run(module));
  progress.done();
  if (!compiled || failed(checkArenaSize(module, flags)))
    return failure();
  return success();
}

/// Reports, at the graph's file, a name of genai_config.json's vision and
/// embedding sections that their graphs do not have.
LogicalResult checkGenaiNames(MutableArrayRef<plan::StageGraph> stages,
                              const GenaiMultimodal &mm) {
  for (plan::StageGraph &stage : stages) {
    auto main = stage.module.lookupSymbol<func::FuncOp>("main");
    auto has = [&](bool input, StringRef name) {
      unsigned count = input ? main.getNumArguments() : main.getNumResults();
      for (unsigned i = 0; i < count; ++i)
        if ((input ? plan::getArgName(main, i)
                   : plan::getResultName(main, i)) == name)
          return true;
      return false;
    };
    SmallVector<std::tuple<bool, std::string, std::string>> names;
    if (stage.role == fb::StageRole::Vision) {
      for (const auto &[key, input] : mm.visionInputs)
        names.push_back({true, input, "model.vision.inputs." + key});
      names.push_back(
          {false, mm.visionFeatures, "model.vision.outputs.image_features"});
    }
    if (stage.role == fb::StageRole::Embed) {
      names.push_back({true, mm.embeddingFeatures,
                       "model.embedding.inputs.image_features"});
      names.push_back(
          {false, mm.embeddingOutput, "model.embedding.outputs.inputs_embeds"});
    }
    for (const auto &[input, name, field] : names)
      if (!main || !has(input, name))
        return emitError(FileLineColLoc::get(stage.module.getContext(),
                                             stage.path, 0, 0))
               << "the graph has no " << (input ? "input" : "output") << " '"
               << name << "' (genai_config.json's " << field << ")";
  }
  return success();
}

/// After a vision graph failed to compile: names the dimensions of its
/// inputs, past the first (the patches or tiles), that the export left
/// symbolic, since an exporter that leaves an encoder's feature widths
/// symbolic gives shapes that do not broadcast until --dim fixes them.
void noteSymbolicWidths(plan::StageGraph &stage) {
  auto main = stage.module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return;
  std::string dims;
  llvm::raw_string_ostream os(dims);
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    auto type = dyn_cast<RankedTensorType>(main.getArgument(i).getType());
    auto params = main.getArgAttrOfType<ArrayAttr>(i, "moe.dim_params");
    if (!type || !params)
      continue;
    for (int64_t d = 1; d < type.getRank(); ++d) {
      auto name = d < int64_t(params.size()) ? dyn_cast<StringAttr>(params[d])
                                             : StringAttr();
      if (!type.isDynamicDim(d) || !name || name.getValue().empty())
        continue;
      os << (dims.empty() ? "" : ", ") << plan::getArgName(main, i) << " dim "
         << d << " '" << name.getValue() << "'";
    }
  }
  if (dims.empty())
    return;
  llvm::errs() << "moec: note: " << stage.path
               << ": these input dimensions are symbolic in the export: "
               << dims
               << "; where they are fixed sizes (feature widths, tile sides, "
                  "position or interpolation columns), give each "
                  "with --dim NAME=N (docs/multimodal.md)\n";
}

} // namespace

int moec::runMultimodalCompile(const CompileFlags &flags,
                               const MultimodalFolder &folder) {
  MLIRContext context;
  configureContext(context);
  onnx_import::ModelDiagnosticHandler diagnostics(&context, llvm::errs(),
                                                  "moec");
  CompileProgress progress(&context, flags.report.showProgress());
  int64_t maxSeq = static_cast<int64_t>(flags.shapes.maxSeq);
  plan::ExpertWeightType expertWeights = *flags.weights.getExpertWeightType();

  progress.phase("importing " + folder.dir);
  // onnxruntime-genai's one decoder runs the prompt and the decode steps:
  // its GroupQueryAttention reads positions from an input, and as the
  // Prefill stage it is imported as a first prompt (Compile.cpp's
  // single-graph generation plans).
  const bool genai = folder.genai.has_value();
  onnx_import::ImportOptions decodeForm, prefillForm;
  decodeForm.positionInput = genai;
  prefillForm.firstPrompt = genai;
  decodeForm.widenFloat16 = prefillForm.widenFloat16 = flags.input.widenFloat16;
  OwningOpRef<ModuleOp> decode =
      onnx_import::importOnnxModel(&context, folder.decode, decodeForm);
  if (!decode)
    return kFailure;
  std::vector<OwningOpRef<ModuleOp>> owned;
  std::vector<plan::StageGraph> stages;
  for (auto [name, genaiName, path, role] :
       {std::tuple("image_encoder", "vision", &folder.imageEncoder,
                   fb::StageRole::Vision),
        std::tuple("multi_modal_projector", "", &folder.projector,
                   fb::StageRole::Vision),
        std::tuple("embed", "embedding", &folder.embed, fb::StageRole::Embed),
        std::tuple("language_model", "decoder", &folder.languageModel,
                   fb::StageRole::Prefill),
        std::tuple("lm_head", "", &folder.lmHead, fb::StageRole::Head)}) {
    if (path->empty())
      continue;
    owned.push_back(onnx_import::importOnnxModel(
        &context, *path,
        role == fb::StageRole::Prefill ? prefillForm : decodeForm));
    if (!owned.back())
      return kFailure;
    // The language model's pass-through states, as the decode's.
    if (role == fb::StageRole::Prefill)
      plan::dropPassThroughStates(owned.back().get());
    stages.push_back(
        {genai ? genaiName : name, *path, role, owned.back().get(), {}});
  }
  // The decode steps' embeddings: the embedding graph's table lookup in
  // front of the genai decoder (a step has no image features).
  if (genai) {
    const GenaiMultimodal &mm = *folder.genai->multimodal;
    auto embed = llvm::find_if(stages, [](const plan::StageGraph &stage) {
      return stage.role == fb::StageRole::Embed;
    });
    if (failed(checkGenaiNames(stages, mm)) ||
        failed(plan::takeTokenIds(*decode, folder.decode, mm.decoderEmbeds,
                                  *embed, mm.embeddingIds)))
      return kFailure;
  }
  plan::specializeForGeneration(*decode);
  for (plan::StageGraph &stage : stages)
    if (genai && stage.role == fb::StageRole::Embed)
      plan::specializeForGeneration(stage.module);
    else if (genai && stage.role == fb::StageRole::Prefill) {
      // Its batch: dimension 0 of the embeddings (it takes no token ids).
      auto main = stage.module.lookupSymbol<func::FuncOp>("main");
      for (unsigned i = 0; main && i < main.getNumArguments(); ++i)
        if (plan::getArgName(main, i) ==
            folder.genai->multimodal->decoderEmbeds)
          if (auto params =
                  main.getArgAttrOfType<ArrayAttr>(i, "moe.dim_params"))
            if (auto batch = dyn_cast<StringAttr>(params[0]);
                batch && !batch.getValue().empty()) {
              llvm::StringSet<> used;
              plan::fixInputDims(stage.module, {batch.str() + "=1"}, used);
            }
      plan::specializeForGeneration(stage.module);
    }
  // --dim: fixed sizes (a vision encoder's feature widths, which the
  // exporter left symbolic), each naming a dimension of some graph.
  llvm::StringSet<> used;
  plan::fixInputDims(*decode, flags.shapes.fixedDims, used);
  for (plan::StageGraph &stage : stages)
    plan::fixInputDims(stage.module, flags.shapes.fixedDims, used);
  for (const std::string &dim : flags.shapes.fixedDims)
    if (!used.contains(StringRef(dim).split('=').first)) {
      llvm::errs() << "moec: error: " << folder.dir << ": --dim " << dim
                   << ": no input of the folder's graphs has a dynamic "
                      "dimension named '"
                   << StringRef(dim).split('=').first << "'\n";
      return kFailure;
    }
  plan::GenerationSearch search;
  search.otherInputs = plan::getDecodeTokenFeeds(*decode);
  search.stagedPrefill = true;
  // The genai prefill starts the recurrences' states from zeros.
  search.firstPromptPrefill = genai;
  FailureOr<plan::GenerationSignature> sig = plan::findGenerationSignature(
      *decode, folder.decode, ModuleOp(), "", maxSeq, search);
  if (failed(sig))
    return kFailure;
  if (genai)
    sig->eosIds = folder.genai->eosTokenIds;
  FailureOr<plan::MultimodalSignature> mm = plan::findMultimodalSignature(
      stages, *decode, folder.decode, folder.config, *sig);
  if (failed(mm))
    return kFailure;

  llvm::StringMap<int64_t> opsBefore = plan::countOps(*decode);
  moec::verify::ValidationOptions validation;
  validation.enabled = flags.validation.enabled;
  validation.maxTokens = maxSeq - 1;
  validation.corrupt = flags.validation.testCorruptRewrite;
  moec::verify::registerRewriteValidator(context, validation);
  // Every sequence is at most max_seq - 1 tokens before a new one; the head
  // reads the last position only; the encoder's patches are the image
  // tokens' merged patches, so at most (max_seq - 1) * merge^2.
  if (failed(compileGraph(context, *decode, flags, maxSeq - 1,
                          plan::getGenerationBounds(*sig, false), progress,
                          /*expertParallel=*/true)))
    return kFailure;
  int64_t merge = std::max<int64_t>(1, folder.config.spatialMergeSize);
  for (plan::StageGraph &stage : stages) {
    int64_t maxTokens = maxSeq - 1;
    if (stage.role == fb::StageRole::Head)
      maxTokens = 1;
    if (stage.role == fb::StageRole::Vision)
      maxTokens = (maxSeq - 1) * merge * merge;
    if (failed(compileGraph(context, stage.module, flags, maxTokens, {},
                            progress, stage.role == fb::StageRole::Prefill))) {
      if (stage.role == fb::StageRole::Vision)
        noteSymbolicWidths(stage);
      return kFailure;
    }
  }
  moec::verify::releaseRewriteValidatorMemory(context);
  plan::pruneFeeds(stages);
  // --int8-activations without --weight-dtype int4: the model's own
  // block-quantized weights.
  if (flags.weights.int8Activations && !flags.weights.isInt4()) {
    SmallVector<ModuleOp> modules = {*decode};
    for (plan::StageGraph &stage : stages)
      modules.push_back(stage.module);
    if (!plan::markInt8Activations(modules)) {
      llvm::errs() << "moec: error: --int8-activations quantizes the "
                      "activations of products with int4 or int8 weights, "
                      "but the model has none (MatMulNBits, QMoE); use "
                      "--weight-dtype int4 to make them\n";
      return kFailure;
    }
  }
  // --weight-dtype narrows the dense matrices of every graph but those
  // --keep-f32 names.
  if (flags.weights.narrows()) {
    SmallVector<ModuleOp> modules = {*decode};
    for (plan::StageGraph &stage : stages)
      modules.push_back(stage.module);
    if (failed(plan::keepDenseWeightsWide(modules, flags.weights.keepF32,
                                          /*cuda=*/false)))
      return kFailure;
    plan::Int4Options int4;
    int4.int8Activations = flags.weights.int8Activations;
    if (flags.weights.isInt4() &&
        failed(plan::quantizeWeightsToInt4(modules, int4)))
      return kFailure;
  }
  if (flags.report.verbose)
    plan::printMoeLayers(*decode, llvm::errs(), expertWeights);
  // The report is the decode graph's, with the stages' names and arenas
  // (a tiered plan's also lists its tiers, read back from the plan).
  uint64_t deviceMemoryBytes = *flags.tiers.getDeviceMemoryBytes();
  llvm::json::Object extra;
  if (!flags.report.report.empty()) {
    llvm::json::Array stageReports;
    for (const plan::StageGraph &stage : stages) {
      llvm::json::Object entry{{"name", stage.name},
                               {"role", fb::EnumNameStageRole(stage.role)}};
      FailureOr<SmallVector<func::FuncOp>> funcs =
          plan::getDeviceFunctions(stage.module);
      if (succeeded(funcs))
        if (auto arena =
                funcs->front()->getAttrOfType<IntegerAttr>("moe.arena_size"))
          entry["arena_bytes"] = arena.getInt();
      stageReports.push_back(std::move(entry));
    }
    extra["multimodal"] =
        llvm::json::Object{{"stages", std::move(stageReports)}};
    if (!deviceMemoryBytes &&
        failed(plan::writeReport(*decode, opsBefore, flags.report.report,
                                 expertWeights, std::move(extra))))
      return kFailure;
  }
  FailureOr<plan::TierOptions> tiers =
      getTierOptions(*decode, flags, deviceMemoryBytes);
  if (failed(tiers))
    return kFailure;

  const std::string &outputPath = flags.output.output;
  FailureOr<plan::PlanFinalizer> withProvenance = recordProvenance(flags);
  progress.phase("writing " + outputPath);
  if (failed(withProvenance) ||
      failed(plan::emitMultimodalPlan(*decode, stages, *sig, *mm, outputPath,
                                      *withProvenance, expertWeights, *tiers)))
    return kFailure;
  FailureOr<std::unique_ptr<moert::Plan>> written =
      loadWrittenPlan(*decode, outputPath);
  progress.done();
  if (failed(written) ||
      (deviceMemoryBytes &&
       failed(reportTiers(*decode, flags, **written, opsBefore, expertWeights,
                          std::move(extra)))))
    return kFailure;
  std::string error;
  if (genai && !copyTokenizerFiles(*folder.genai, outputPath, error)) {
    llvm::errs() << "moec: error: " << error << "\n";
    return kFailure;
  }
  if (!flags.report.quiet) {
    printCompileSummary(llvm::outs(), outputPath, **written, *decode,
                        progress.elapsedSeconds());
    llvm::outs() << "moec: multimodal plan: stages";
    for (const moert::StageDesc &stage : (*written)->multimodal()->stages)
      llvm::outs() << " " << stage.name;
    llvm::outs() << "; image token " << mm->imageTokenId << ", spatial merge "
                 << mm->spatialMergeSize << "\n";
  }
  return kSuccess;
}
