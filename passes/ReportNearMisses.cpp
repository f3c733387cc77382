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

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/raw_ostream.h"

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

/// How many ops past a top-k or arg-max its indices are followed to an op
/// that selects rows or weights by them.
constexpr int kMaxSelectionDepth = 6;

/// The op that selects rows or weights by the indices `value` (a one-hot,
/// an equality with an expert index, a gather or scatter at them, or the
/// rows where they are nonzero), through at most kMaxSelectionDepth
/// reshapes, casts and slices; null when none does.
Operation *findSelection(Value value) {
  SmallVector<std::pair<Value, int>> worklist{{value, 0}};
  llvm::SmallPtrSet<Operation *, 16> visited;
  while (!worklist.empty()) {
    auto [current, depth] = worklist.pop_back_val();
    for (OpOperand &use : current.getUses()) {
      Operation *user = use.getOwner();
      if (isa<moe::OneHotOp, moe::EqualOp, moe::NonZeroOp>(user))
        return user;
      if (auto gather = dyn_cast<moe::GatherOp>(user);
          gather && use.get() == gather.getIndices())
        return user;
      if (auto scatter = dyn_cast<moe::ScatterElementsOp>(user);
          scatter && use.get() == scatter.getIndices())
        return user;
      if (auto scatter = dyn_cast<moe::ScatterNDOp>(user);
          scatter && use.get() == scatter.getIndices())
        return user;
      if (depth + 1 >= kMaxSelectionDepth ||
          !isa<moe::ReshapeOp, moe::CastOp, moe::SliceOp, moe::UnsqueezeOp,
               moe::SqueezeOp, moe::FlattenOp, moe::TransposeOp>(user) ||
          !visited.insert(user).second)
        continue;
      for (Value result : user->getResults())
        worklist.push_back({result, depth + 1});
    }
  }
  return nullptr;
}

/// The static size of dimension `axis` (negative: from the end) of
/// `value`, or -1.
int64_t getStaticDim(Value value, int64_t axis) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() == 0)
    return -1;
  if (axis < 0)
    axis += type.getRank();
  if (axis < 0 || axis >= type.getRank() || type.isDynamicDim(axis))
    return -1;
  return type.getDimSize(axis);
}

/// The first other top-k or arg-max the values of `op` reach without passing
/// through a projection, or null: `op` then selects within the gate of
/// that router (DeepSeek's group top-k before its expert top-k, GShard's
/// first choice masking the logits of its second), not a layer of its own.
Operation *getDownstreamRouter(Operation *op) {
  SmallVector<std::pair<Operation *, int>> worklist{{op, 0}};
  llvm::SmallPtrSet<Operation *, 32> visited{op};
  while (!worklist.empty()) {
    auto [current, depth] = worklist.pop_back_val();
    for (Operation *user : current->getUsers()) {
      if (isa<moe::TopKOp, moe::ArgMaxOp>(user) && user != op)
        return user;
      if (depth + 1 < kMaxRoutingDepth &&
          !isa<moe::MatMulOp, moe::GemmOp>(user) && visited.insert(user).second)
        worklist.push_back({user, depth + 1});
    }
  }
  return nullptr;
}

/// The remark for `op` when it looks like the router of a MoE layer that
/// no detector considered: a top-k of fewer than E, or an arg-max, over a
/// static axis of E >= 2 experts whose indices select rows or weights.
/// Empty when it does not look like one.
std::string describeUnknownRouter(Operation *op) {
  int64_t experts = -1;
  Value indices;
  const char *what = "";
  if (auto topK = dyn_cast<moe::TopKOp>(op)) {
    int64_t k = getStaticDim(topK.getIndices(), topK.getAxis());
    experts = getStaticDim(topK.getInput(), topK.getAxis());
    if (k < 1 || k >= experts)
      return "";
    indices = topK.getIndices();
    what = "a top-k";
  } else if (auto argMax = dyn_cast<moe::ArgMaxOp>(op)) {
    experts = getStaticDim(argMax.getData(), argMax.getAxis());
    indices = argMax.getOutput();
    what = "an arg-max";
  }
  if (experts < 2 || !indices)
    return "";
  Operation *selection = findSelection(indices);
  if (!selection)
    return "";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "MoE layer not detected: " << what << " over " << experts
     << " experts selects rows or weights (" << selection->getName() << " at "
     << selection->getLoc()
     << "), but no detector knows this form; it runs through generic ops";
  return text;
}

struct ReportNearMissesPass
    : public moec::impl::MoeReportNearMissesBase<ReportNearMissesPass> {
  using MoeReportNearMissesBase::MoeReportNearMissesBase;

  void runOnOperation() override {
    // The candidates in program order: anchors a detector recorded reasons
    // on, and top-ks and arg-maxes that look like routers of a layer no
    // detector considered.
    struct Candidate {
      Operation *op;
      ArrayAttr reasons;
      std::string unknown;
    };
    SmallVector<Candidate> candidates;
    getOperation().walk([&](Operation *op) {
      if (auto reasons = op->getAttrOfType<ArrayAttr>(kNearMissesAttr)) {
        op->removeAttr(kNearMissesAttr);
        if (!reasons.empty())
          candidates.push_back({op, reasons, ""});
        return;
      }
      if (isa<moe::TopKOp, moe::ArgMaxOp>(op))
        if (std::string unknown = describeUnknownRouter(op); !unknown.empty())
          candidates.push_back({op, nullptr, std::move(unknown)});
    });
    // One remark per gate: the candidates whose values reach a later router
    // belong to that router's gate, which is remarked on once, with a
    // recorded reason (else the last router's own text).
    auto getGate = [&](Operation *op) {
      Operation *gate = op;
      for (int i = 0; i < kMaxRoutingDepth; ++i) {
        Operation *next = getDownstreamRouter(gate);
        if (!next)
          break;
        gate = next;
      }
      return gate;
    };
    llvm::MapVector<Operation *, SmallVector<Candidate *>> gates;
    for (Candidate &candidate : candidates) {
      if (feedsDetectedLayer(candidate.op))
        continue;
      gates[getGate(candidate.op)].push_back(&candidate);
    }
    for (auto &entry : gates) {
      Operation *gate = entry.first;
      SmallVector<Candidate *> &members = entry.second;
      // The gate's own router's reasons first: a detector that tried
      // the whole gate says most; else the first recorded among its parts.
      auto recorded = llvm::find_if(members, [&](Candidate *candidate) {
        return candidate->reasons && candidate->op == gate;
      });
      if (recorded == members.end())
        recorded = llvm::find_if(
            members, [](Candidate *candidate) { return candidate->reasons; });
      if (recorded != members.end()) {
        for (Attribute reason : (*recorded)->reasons) {
          (*recorded)->op->emitRemark(cast<StringAttr>(reason).getValue());
          if (!allReasons)
            break;
        }
        continue;
      }
      Candidate *last = members.back();
      last->op->emitRemark(last->unknown);
    }
  }
};

} // namespace
