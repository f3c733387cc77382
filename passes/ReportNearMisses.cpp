//===- ReportNearMisses.cpp - One remark per MoE layer left generic -------===//
//
// The detectors record why they rejected a candidate layer on its anchor
// (NearMiss.h); this pass, after all of them, turns the records of the
// layers that stayed generic into remarks and drops the rest, so that a
// layer one detector found gets no "not detected" remark from another.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/MoeOps.h"
#include "passes/NearMiss.h"

#include "llvm/ADT/SmallPtrSet.h"

namespace moec {
#define GEN_PASS_DEF_MOEREPORTNEARMISSES
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// How many ops past the anchor the routing of its layer is looked for: a
/// generic gate the detectors kept reaches its dispatch through a few
/// reshapes, casts and normalisations.
constexpr int kMaxRoutingDepth = 12;

/// Whether `use` feeds the routing of a detected layer: the expert indices
/// a tokens' dispatch or a slot assignment reads, or the weights and
/// indices a combine reads.
bool isRoutingUse(OpOperand &use) {
  Operation *owner = use.getOwner();
  Value value = use.get();
  if (auto dispatch = dyn_cast<moe::DispatchOp>(owner))
    return value == dispatch.getIndices();
  if (auto assign = dyn_cast<moe::AssignSlotsOp>(owner))
    return value == assign.getIndices();
  if (auto combine = dyn_cast<moe::CombineOp>(owner))
    return value == combine.getWeights() || value == combine.getIndices();
  return false;
}

/// Whether the values of `anchor` reach the routing of a detected layer
/// without passing through a projection: the layer was taken with the gate
/// kept as generic ops. Projections end the search, since past them the
/// values are the next layer's tokens, whose routing is not this anchor's.
bool feedsDetectedLayer(Operation *anchor) {
  SmallVector<std::pair<Operation *, int>> worklist{{anchor, 0}};
  llvm::SmallPtrSet<Operation *, 32> visited{anchor};
  while (!worklist.empty()) {
    auto [op, depth] = worklist.pop_back_val();
    for (Value result : op->getResults())
      for (OpOperand &use : result.getUses()) {
        if (isRoutingUse(use))
          return true;
        Operation *user = use.getOwner();
        if (depth + 1 >= kMaxRoutingDepth ||
            isa<moe::MatMulOp, moe::GemmOp, moe::ExpertsOp, moe::SharedExpertOp,
                moe::DispatchOp, moe::CombineOp>(user) ||
            !visited.insert(user).second)
          continue;
        worklist.push_back({user, depth + 1});
      }
  }
  return false;
}

struct ReportNearMissesPass
    : public moec::impl::MoeReportNearMissesBase<ReportNearMissesPass> {
  using MoeReportNearMissesBase::MoeReportNearMissesBase;

  void runOnOperation() override {
    SmallVector<std::pair<Operation *, ArrayAttr>> anchors;
    getOperation().walk([&](Operation *op) {
      if (auto reasons = op->getAttrOfType<ArrayAttr>(kNearMissesAttr))
        anchors.push_back({op, reasons});
    });
    for (auto [anchor, reasons] : anchors) {
      anchor->removeAttr(kNearMissesAttr);
      if (reasons.empty() || feedsDetectedLayer(anchor))
        continue;
      for (Attribute reason : reasons) {
        anchor->emitRemark(cast<StringAttr>(reason).getValue());
        if (!allReasons)
          break;
      }
    }
  }
};

} // namespace
