//===- AnalyzeBatchRows.cpp - may a step run the tokens of many sequences? ===//
//
// moe-analyze-batch-rows: continuous batching runs the tokens of several
// sequences as the rows of one step of a generation graph's token axis
// (docs/serving.md). That is exact only if no op makes one token row
// depend on another except attention, which the runtime replaces by each
// row's attention over its own sequence's KV cache: so the attention must
// be causal over the rows (its mask `keys <= queries` over positions from
// 0, built from the row count alone, possibly within a window of W keys,
// which the verdict records per attention), and its keys and values must be the
// rows themselves (the cache writes); and the recurrences that carry a state
// (moe.causal_conv, moe.gated_delta_rule) from a zero start, which the
// runtime runs per sequence from its own state. The pass runs the
// row-independence dataflow (RowIndependence.h) with the named row inputs as
// seeds along their last axis, and records the verdict, or the first op that
// mixes rows another way, as the module's `moe.batch_rows`.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/RowIndependence.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace moec {
#define GEN_PASS_DEF_MOEANALYZEBATCHROWS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace moec {
namespace {

struct AnalyzeBatchRowsPass
    : public impl::MoeAnalyzeBatchRowsBase<AnalyzeBatchRowsPass> {
  using MoeAnalyzeBatchRowsBase::MoeAnalyzeBatchRowsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (rowInputs.empty()) {
      module.emitError("moe-analyze-batch-rows needs row-inputs (the token "
                       "ids and positions)");
      return signalPassFailure();
    }
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main)
      return;
    rows::Config config;
    config.rowInputs.assign(rowInputs.begin(), rowInputs.end());
    rows::Analysis analysis(main, config);
    Builder b(module.getContext());
    auto strings = [&](ArrayRef<std::string> names) {
      return b.getArrayAttr(llvm::map_to_vector(names, [&](const auto &name) {
        return Attribute(b.getStringAttr(name));
      }));
    };
    SmallVector<NamedAttribute> fields;
    if (succeeded(analysis.run())) {
      fields.push_back(b.getNamedAttr("inputs", strings(analysis.splitInputs)));
      fields.push_back(
          b.getNamedAttr("outputs", strings(analysis.joinedOutputs)));
      fields.push_back(
          b.getNamedAttr("symbol", b.getStringAttr(analysis.symbol)));
      fields.push_back(b.getNamedAttr(
          "windows", b.getDenseI64ArrayAttr(analysis.attentionWindows)));
      if (!analysis.stateOutputs.empty())
        fields.push_back(
            b.getNamedAttr("states", strings(analysis.stateOutputs)));
    } else {
      rows::appendFailure(b, analysis, fields);
    }
    module->setAttr("moe.batch_rows", b.getDictionaryAttr(fields));
  }
};

} // namespace
} // namespace moec
