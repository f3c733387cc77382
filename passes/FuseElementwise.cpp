//===- FuseElementwise.cpp - fuse chains of elementwise ops ---------------===//

#include "passes/Passes.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace moec {
#define GEN_PASS_DEF_MOEFUSEELEMENTWISE
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// True for the float32 elementwise ops the runtime's fused programs execute
/// (Moe_FusibleElementwise in their ODS definitions).
bool isFusible(Operation *op) {
  if (!op->hasTrait<moe::OpTrait::FusibleElementwise>())
    return false;
  // Max and Min are binary in a program.
  if (isa<moe::MaxOp, moe::MinOp>(op) && op->getNumOperands() != 2)
    return false;
  auto isF32 = [](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && tensor.getElementType().isF32();
  };
  return op->getNumResults() == 1 && isF32(op->getResult(0).getType()) &&
         llvm::all_of(op->getOperandTypes(), isF32);
}

/// True for a float constant with a single value, which a program holds as an
/// immediate instead of an input.
bool isScalarConstant(Value value) {
  auto constant = value.getDefiningOp<moe::ConstantOp>();
  if (!constant)
    return false;
  auto elements = dyn_cast<DenseElementsAttr>(constant.getValue());
  return elements && elements.isSplat() && elements.getElementType().isF32();
}

struct Group {
  SmallVector<Operation *> members;
  RankedTensorType shape;
  bool closed = false;
};

struct FuseElementwisePass
    : public moec::impl::MoeFuseElementwiseBase<FuseElementwisePass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<Group> groups;
    llvm::DenseMap<Operation *, unsigned> groupOf;

    auto closeGroupsUsedBy = [&](Operation *op, int except) {
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp()) {
          auto it = groupOf.find(def);
          if (it != groupOf.end() && static_cast<int>(it->second) != except)
            groups[it->second].closed = true;
        }
    };

    for (Operation &op : func.getBody().front()) {
      if (!isFusible(&op)) {
        closeGroupsUsedBy(&op, -1);
        continue;
      }
      auto type = cast<RankedTensorType>(op.getResult(0).getType());
      int join = -1;
      for (Value operand : op.getOperands()) {
        Operation *def = operand.getDefiningOp();
        auto it = def ? groupOf.find(def) : groupOf.end();
        if (it == groupOf.end())
          continue;
        Group &group = groups[it->second];
        if (!group.closed && group.shape == type) {
          join = it->second;
          break;
        }
      }
      if (join < 0) {
        join = groups.size();
        groups.push_back({{}, type, false});
      }
      groups[join].members.push_back(&op);
      groupOf[&op] = join;
      closeGroupsUsedBy(&op, join);
    }

    for (Group &group : groups)
      if (group.members.size() > 1)
        fuse(group);
  }

  /// Replaces the members of `group` by one fused op placed at the last
  /// member.
  void fuse(Group &group) {
    llvm::SmallPtrSet<Operation *, 8> members(group.members.begin(),
                                              group.members.end());
    llvm::SetVector<Value> inputs;
    SmallVector<Value> outputs;
    SmallVector<Operation *> constants;
    for (Operation *op : group.members) {
      for (Value operand : op->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (def && members.contains(def))
          continue;
        if (isScalarConstant(operand)) {
          if (!llvm::is_contained(constants, def))
            constants.push_back(def);
          continue;
        }
        inputs.insert(operand);
      }
      if (llvm::any_of(op->getUsers(), [&](Operation *user) {
            return !members.contains(user);
          }))
        outputs.push_back(op->getResult(0));
    }

    // The runtime's programs take at most this many inputs
    // (docs/plan-format.md); a wider group stays unfused.
    constexpr size_t kMaxProgramInputs = 32;
    if (inputs.size() > kMaxProgramInputs)
      return;

    Operation *last = group.members.back();
    OpBuilder builder(last);
    SmallVector<Type> outputTypes;
    for (Value output : outputs)
      outputTypes.push_back(output.getType());
    auto fused = moe::FusedElementwiseOp::create(
        builder, last->getLoc(), outputTypes, inputs.getArrayRef());
    Block *body = builder.createBlock(&fused.getBody());
    IRMapping mapping;
    for (Value input : inputs)
      mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
    for (Operation *constant : constants)
      builder.clone(*constant, mapping);
    for (Operation *op : group.members)
      builder.clone(*op, mapping);
    SmallVector<Value> yielded;
    for (Value output : outputs)
      yielded.push_back(mapping.lookup(output));
    moe::YieldOp::create(builder, last->getLoc(), yielded);

    for (auto [output, result] : llvm::zip(outputs, fused.getResults()))
      output.replaceAllUsesWith(result);
    for (Operation *op : llvm::reverse(group.members))
      op->erase();
  }
};

} // namespace
