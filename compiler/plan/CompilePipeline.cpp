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
      {"ops_after", toJson(countOps(module))}};

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
