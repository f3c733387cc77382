//===- CompilePipeline.cpp - from imported IR to a plan -------------------===//

#include "compiler/plan/CompilePipeline.h"

#include "dialects/moe/MoeOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

namespace moec::plan {

void buildCompilePipeline(OpPassManager &pm, const CompileOptions &options) {
  OpPassManager &funcPM = pm.nest<func::FuncOp>();
  funcPM.addPass(createCanonicalizerPass());
  funcPM.addPass(createMoeRefineShapes());
  funcPM.addPass(createCSEPass());
  if (options.simplifyOnly)
    return;
  funcPM.addPass(createMoeDetectExperts());
  funcPM.addPass(createMoeDetectDenseExperts());
  funcPM.addPass(createMoeFuseNorms());
  funcPM.addPass(createMoeFuseElementwise());
  // Fusion leaves the scalar constants it copied into regions unused.
  funcPM.addPass(createCanonicalizerPass());
  MoeBoundShapesOptions bounds;
  bounds.maxTokens = options.maxTokens;
  bounds.dimBounds.assign(options.dimBounds.begin(), options.dimBounds.end());
  funcPM.addPass(createMoeBoundShapes(bounds));
  funcPM.addPass(createMoePlanMemory());
}

llvm::StringMap<int64_t> countOps(ModuleOp module) {
  llvm::StringMap<int64_t> counts;
  module.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "moe" &&
        !op->getParentOfType<moe::FusedElementwiseOp>())
      ++counts[op->getName().getStringRef()];
  });
  return counts;
}

static llvm::json::Object toJson(const llvm::StringMap<int64_t> &counts) {
  llvm::json::Object object;
  for (const auto &entry : counts)
    object[entry.getKey().str()] = entry.getValue();
  return object;
}

/// One routed MoE layer of a compiled module: a `moe.router`, the
/// `moe.experts` its dispatched rows run through and the `moe.shared_expert`s
/// on the same tokens.
struct MoeLayerInfo {
  moe::RouterOp router;
  moe::ExpertsOp experts;
  int64_t numExperts = 0;
  int64_t sharedExperts = 0;
};

static SmallVector<MoeLayerInfo> collectMoeLayers(ModuleOp module) {
  SmallVector<MoeLayerInfo> layers;
  module.walk([&](moe::RouterOp router) {
    MoeLayerInfo info;
    info.router = router;
    for (Operation *user : router.getIndices().getUsers()) {
      auto dispatch = dyn_cast<moe::DispatchOp>(user);
      if (!dispatch)
        continue;
      info.numExperts = dispatch.getNumExperts();
      for (Operation *rowsUser : dispatch.getRows().getUsers())
        if (auto experts = dyn_cast<moe::ExpertsOp>(rowsUser))
          info.experts = experts;
      for (Operation *tokensUser : dispatch.getTokens().getUsers())
        info.sharedExperts += isa<moe::SharedExpertOp>(tokensUser);
    }
    layers.push_back(info);
  });
  return layers;
}

/// A static dimension as JSON: null when dynamic.
static llvm::json::Value dimToJson(int64_t dim) {
  return ShapedType::isDynamic(dim) ? llvm::json::Value(nullptr)
                                    : llvm::json::Value(dim);
}

static int64_t hiddenSize(MoeLayerInfo layer) {
  if (!layer.experts)
    return ShapedType::kDynamic;
  return cast<RankedTensorType>(layer.experts.getOutput().getType())
      .getDimSize(1);
}

static llvm::json::Array moeLayersToJson(ArrayRef<MoeLayerInfo> layers) {
  llvm::json::Array array;
  for (MoeLayerInfo layer : layers) {
    moe::RouterOp router = layer.router;
    std::optional<uint64_t> capacity = router.getCapacity();
    llvm::json::Object object{
        {"experts", layer.numExperts},
        {"top_k", router.getTopKAttr().getInt()},
        {"score", stringifyEnum(router.getScoreFunction()).str()},
        {"topk_before_softmax", router.getScoreAfterTopk()},
        {"normalize", router.getNormalize()},
        {"scale", router.getRoutedScalingFactorAttr().getValueAsDouble()},
        {"groups", router.getNGroupAttr().getInt()},
        {"topk_groups", router.getTopkGroupAttr().getInt()},
        {"selection_bias", static_cast<bool>(router.getBias())},
        {"capacity", capacity ? llvm::json::Value(int64_t(*capacity))
                              : llvm::json::Value(nullptr)},
        {"shared_experts", layer.sharedExperts},
        {"activation",
         layer.experts ? llvm::json::Value(
                             stringifyEnum(layer.experts.getActivation()).str())
                       : llvm::json::Value(nullptr)},
        {"hidden", dimToJson(hiddenSize(layer))},
        {"ffn", layer.experts ? dimToJson(layer.experts.getInterSize())
                              : llvm::json::Value(nullptr)}};
    array.push_back(std::move(object));
  }
  return array;
}

void printMoeLayers(ModuleOp module, llvm::raw_ostream &os) {
  SmallVector<MoeLayerInfo> layers = collectMoeLayers(module);
  if (layers.empty()) {
    os << "moec: no MoE layer detected (the model runs through generic ops; "
          "see the remarks)\n";
    return;
  }
  auto dim = [](int64_t value) -> std::string {
    return ShapedType::isDynamic(value) ? "?" : std::to_string(value);
  };
  os << llvm::formatv("moec: {0} MoE layer(s)\n", layers.size());
  os << llvm::formatv("{0,-6}{1,-8}{2,-6}{3,-8}{4,-11}{5,-10}{6,-7}{7,-8}"
                      "{8,-5}{9,-9}{10,-7}{11,-7}{12,-7}{13}\n",
                      "layer", "experts", "top_k", "score", "topk_first",
                      "normalize", "scale", "groups", "bias", "capacity",
                      "shared", "hidden", "ffn", "activation");
  for (auto [index, layer] : llvm::enumerate(layers)) {
    moe::RouterOp router = layer.router;
    std::optional<uint64_t> capacity = router.getCapacity();
    os << llvm::formatv(
        "{0,-6}{1,-8}{2,-6}{3,-8}{4,-11}{5,-10}{6,-7}{7,-8}{8,-5}{9,-9}"
        "{10,-7}{11,-7}{12,-7}{13}\n",
        index, layer.numExperts, router.getTopKAttr().getInt(),
        stringifyEnum(router.getScoreFunction()),
        router.getScoreAfterTopk() ? "yes" : "no",
        router.getNormalize() ? "yes" : "no",
        llvm::formatv("{0}",
                      router.getRoutedScalingFactorAttr().getValueAsDouble())
            .str(),
        llvm::formatv("{0}/{1}", router.getTopkGroupAttr().getInt(),
                      router.getNGroupAttr().getInt())
            .str(),
        router.getBias() ? "yes" : "no",
        capacity ? std::to_string(*capacity) : "-", layer.sharedExperts,
        dim(hiddenSize(layer)),
        layer.experts ? dim(layer.experts.getInterSize()) : "?",
        layer.experts ? stringifyEnum(layer.experts.getActivation()) : "?");
  }
}

LogicalResult writeReport(ModuleOp module,
                          const llvm::StringMap<int64_t> &opsBefore,
                          StringRef path) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no @main function to report on");
  auto arena = func->getAttrOfType<IntegerAttr>("moe.arena_size");
  auto naive = func->getAttrOfType<IntegerAttr>("moe.naive_size");
  if (!arena || !naive)
    return func.emitError("no memory plan to report on");

  int64_t weightBytes = 0, numWeights = 0, numSteps = 0, numFused = 0;
  for (Operation &op : func.getBody().front()) {
    if (auto constant = dyn_cast<moe::ConstantOp>(op)) {
      auto type = cast<ShapedType>(constant.getType());
      weightBytes += type.getNumElements() *
                     std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
      ++numWeights;
    } else if (!isa<func::ReturnOp>(op)) {
      ++numSteps;
      numFused += isa<moe::FusedElementwiseOp>(op);
    }
  }
  int64_t arenaBytes = arena.getInt(), naiveBytes = naive.getInt();
  llvm::json::Object memory{
      {"arena_bytes", arenaBytes},
      {"naive_bytes", naiveBytes},
      {"saved_fraction",
       naiveBytes ? 1.0 - double(arenaBytes) / double(naiveBytes) : 0.0},
      {"weight_bytes", weightBytes},
      {"weights", numWeights}};
  auto maxTokens = module->getAttrOfType<IntegerAttr>("moe.max_tokens");
  llvm::json::Object root{
      {"max_tokens", maxTokens ? llvm::json::Value(maxTokens.getInt())
                               : llvm::json::Value(nullptr)},
      {"memory", std::move(memory)},
      {"steps", numSteps},
      {"fused_elementwise_steps", numFused},
      {"ops_before", toJson(opsBefore)},
      {"ops_after", toJson(countOps(module))},
      {"moe_layers", moeLayersToJson(collectMoeLayers(module))}};

  std::string error;
  auto output = openOutputFile(path, &error);
  if (!output)
    return module.emitError("cannot write report: ") << error;
  output->os() << llvm::formatv("{0:2}", llvm::json::Value(std::move(root)))
               << "\n";
  output->keep();
  return success();
}

} // namespace moec::plan
