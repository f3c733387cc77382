//===- AnalyzeRowIndependence.cpp - may the dense part split its rows? ----===//
//
// moe-analyze-row-independence: expert parallelism may run the dense part of
// a model data-parallel (each device on a share of the rows of the inputs the
// runtime splits, those whose dimension 0 is symbolic) only if no op outside
// the MoE layers makes a row depend on another row: attention over the
// split axis, a reduction or a cumulative sum along it, a reshape that
// merges it with an axis before it, positions computed from its length...
// This pass proves it with a forward dataflow over @main, or names the first
// op that breaks it; moe-insert-all-to-all then splits, or replicates the
// dense part and partitions only the MoE layers' tokens
// (docs/expert-parallelism.md). The lattice is in RowIndependence.h.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/RowIndependence.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace moec {
#define GEN_PASS_DEF_MOEANALYZEROWINDEPENDENCE
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace moec {
namespace {

struct AnalyzeRowIndependencePass
    : public impl::MoeAnalyzeRowIndependenceBase<AnalyzeRowIndependencePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main)
      return;
    rows::Analysis analysis(main);
    Builder b(module.getContext());
    SmallVector<NamedAttribute> fields;
    if (succeeded(analysis.run())) {
      auto inputs = llvm::map_to_vector(
          analysis.splitInputs, [&](const std::string &name) {
            return Attribute(b.getStringAttr(name));
          });
      fields.push_back(b.getNamedAttr("axis", b.getI64IntegerAttr(0)));
      fields.push_back(b.getNamedAttr("inputs", b.getArrayAttr(inputs)));
      auto outputs = llvm::map_to_vector(
          analysis.joinedOutputs, [&](const std::string &name) {
            return Attribute(b.getStringAttr(name));
          });
      fields.push_back(b.getNamedAttr("outputs", b.getArrayAttr(outputs)));
      fields.push_back(
          b.getNamedAttr("symbol", b.getStringAttr(analysis.symbol)));
    } else {
      rows::appendFailure(b, analysis, fields);
    }
    module->setAttr("moe.row_split", b.getDictionaryAttr(fields));
  }
};

} // namespace
} // namespace moec
