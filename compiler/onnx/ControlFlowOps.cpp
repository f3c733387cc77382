//===- ControlFlowOps.cpp - If import -------------------------------------===//
//
// moec's IR is one straight-line block, so If becomes no op of its own:
//
// - When the condition folds to a constant at import (a Constant or
//   initializer, or shape arithmetic on static or provably equal dimensions,
//   such as TorchScript's `if x.size(1) == 1`), only the branch taken is
//   imported, inline; the other is never built. A remark names the branch.
// - When it does not fold, both branches are imported and each output is
//   `Where(cond, then, else)`. Both branches then run whatever the
//   condition, so this is done only where that can change nothing: every
//   pair of outputs has the same element type and provably the same shape
//   (Where would broadcast a [1] against a [4] and return the wrong shape),
//   and every op of both branches has static shapes and constant integer
//   operands, constant indices in range and no integer division by zero
//   (the untaken branch must not be able to fail at run time, as a Reshape
//   to a size that does not fit or a Gather out of range would, where
//   onnxruntime never runs it; GatherND and the Scatters, whose indices
//   nothing checks, are refused). Values of the untaken branch that are
//   NaN or infinite are not selected: Where never mixes them in. A remark
//   says both branches were imported.
// - Anything else is one error naming the node and what stands in the way.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/GraphImporter.h"
#include "compiler/onnx/OpImport.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec::onnx_import;

namespace {

/// How deep the folding of a condition looks: conditions are short chains
/// of shape arithmetic, and a longer chain is not worth following (nor may
/// untrusted input make it recurse without bound).
constexpr unsigned kMaxFoldDepth = 64;

/// Computes the constant `value` folds to, if it does, by running the
/// folders of the ops computing it with the constants their operands fold
/// to. The IR is not changed (canonicalisation does that later); only small
/// values fold (GraphOpsFold.cpp never reads weights).
class ConstantFolder {
public:
  Attribute fold(Value value, unsigned depth = 0) {
    Attribute constant;
    if (matchPattern(value, m_Constant(&constant)))
      return constant;
    auto [it, inserted] = memo.try_emplace(value, Attribute());
    if (!inserted)
      return it->second;
    Operation *op = value.getDefiningOp();
    if (!op || depth > kMaxFoldDepth)
      return {};
    SmallVector<Attribute> operands;
    for (Value operand : op->getOperands())
      operands.push_back(fold(operand, depth + 1));
    SmallVector<OpFoldResult> results;
    if (failed(op->fold(operands, results)) ||
        results.size() != op->getNumResults())
      return {};
    OpFoldResult result = results[cast<OpResult>(value).getResultNumber()];
    Attribute folded;
    if (auto attr = dyn_cast<Attribute>(result))
      folded = attr;
    else if (auto forwarded = dyn_cast<Value>(result); forwarded != value)
      folded = fold(forwarded, depth + 1);
    memo[value] = folded;
    return folded;
  }

private:
  DenseMap<Value, Attribute> memo;
};

/// Returns how messages name the ONNX node `op` was imported from.
std::string describeOp(Operation *op) {
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    return name.getName().str();
  return op->getName().getStringRef().str();
}

/// Returns why `op`, whose shapes are static and whose integer operands are
/// constants, could still fail at run time, or "" if it cannot: the
/// indexing ops that inference does not check against their constant
/// indices, and integer division by zero.
std::string getRunTimeHazard(Operation *op, ConstantFolder &folder) {
  auto outOfRange = [&](Value data, Value indices,
                        int64_t axis) -> std::string {
    auto type = cast<RankedTensorType>(data.getType());
    if (axis < 0)
      axis += type.getRank();
    std::optional<SmallVector<int64_t>> values =
        moec::moe::getInts(folder.fold(indices));
    if (axis < 0 || axis >= type.getRank() || !values)
      return " has indices that cannot be checked";
    int64_t size = type.getDimSize(axis);
    for (int64_t index : *values)
      if (index < -size || index >= size)
        return " has index " + std::to_string(index) +
               ", out of range for size " + std::to_string(size);
    return "";
  };
  return TypeSwitch<Operation *, std::string>(op)
      .Case([&](moec::moe::GatherOp gather) {
        return outOfRange(gather.getData(), gather.getIndices(),
                          static_cast<int64_t>(gather.getAxis()));
      })
      .Case([&](moec::moe::GatherElementsOp gather) {
        return outOfRange(gather.getData(), gather.getIndices(),
                          static_cast<int64_t>(gather.getAxis()));
      })
      .Case<moec::moe::GatherNDOp, moec::moe::ScatterElementsOp,
            moec::moe::ScatterNDOp>([](Operation *) {
        return std::string(" indexes by values not checked at compile time");
      })
      .Case<moec::moe::DivOp, moec::moe::ModOp>([&](Operation *div) {
        std::optional<SmallVector<int64_t>> divisor =
            moec::moe::getInts(folder.fold(div->getOperand(1)));
        if (divisor && llvm::is_contained(*divisor, 0))
          return std::string(" divides by zero");
        return std::string();
      })
      .Default([](Operation *) { return std::string(); });
}

/// Checks that the ops from `first` up to `end` (null: the end of the
/// block), one branch's, cannot fail at run time, so that computing the
/// branch when it is not taken changes nothing; reports why not at `node`.
LogicalResult checkUnconditional(NodeImporter &node, StringRef branch,
                                 Operation *first, Operation *end,
                                 ConstantFolder &folder) {
  auto refuse = [&]() {
    return node.emitError()
           << "the condition does not fold, and " << branch
           << " cannot be computed whatever the condition (both branches "
              "run when If becomes Where): ";
  };
  for (Operation *op = first; op && op != end; op = op->getNextNode()) {
    // Static shapes were checked by inference at compile time; a dynamic
    // one could mismatch at run time.
    auto isStatic = [](Type type) {
      auto tensor = dyn_cast<RankedTensorType>(type);
      return tensor && tensor.hasStaticShape();
    };
    for (Value value : llvm::concat<Value>(op->getOperands(), op->getResults()))
      if (!isStatic(value.getType()))
        return refuse() << describeOp(op) << " has a value of dynamic shape "
                        << value.getType() << ", which could fail at run time";
    // Integers are the indices and sizes that can be out of range (or a
    // divisor that is zero): they must be known.
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      Type element = cast<RankedTensorType>(operand.getType()).getElementType();
      if (element.isInteger() && !element.isInteger(1) && !folder.fold(operand))
        return refuse() << describeOp(op) << " has operand #" << i
                        << ", an integer computed at run time (an index or "
                           "size that could be out of range)";
    }
    std::string hazard = getRunTimeHazard(op, folder);
    if (!hazard.empty())
      return refuse() << describeOp(op) << hazard;
  }
  return success();
}

/// Checks that `a` and `b`, output #`index` of the two branches, provably
/// have the same type, so that Where selects one without broadcasting.
LogicalResult checkSameShape(NodeImporter &node, int index, Value a, Value b) {
  auto typeA = dyn_cast<RankedTensorType>(a.getType());
  auto typeB = dyn_cast<RankedTensorType>(b.getType());
  auto refuse = [&]() {
    return node.emitError()
           << "the condition does not fold, and output #" << index << " ";
  };
  if (!typeA || !typeB)
    return refuse() << "is not a ranked tensor in both branches";
  if (typeA.getElementType() != typeB.getElementType())
    return refuse() << "has element type " << typeA.getElementType()
                    << " in then_branch but " << typeB.getElementType()
                    << " in else_branch";
  if (typeA.getRank() != typeB.getRank())
    return refuse() << "differs in rank between the branches (" << typeA
                    << " and " << typeB << ")";
  for (int64_t dim = 0; dim < typeA.getRank(); ++dim) {
    moec::moe::ShapeEntry entryA = moec::moe::ShapeEntry::ofDim(a, dim);
    moec::moe::ShapeEntry entryB = moec::moe::ShapeEntry::ofDim(b, dim);
    if (!entryA.isSameAs(entryB))
      return refuse() << "has shapes " << typeA << " and " << typeB
                      << " in the branches, which differ or cannot be proven "
                         "equal in dimension "
                      << dim;
  }
  return success();
}

/// Imports `branch` at the end of the current block; returns the first op
/// it created (null if none) in `first`.
LogicalResult importBranch(NodeImporter &node, const onnx::GraphProto &branch,
                           SmallVectorImpl<Value> &outputs, Operation *&first) {
  Block *block = node.getBuilder().getInsertionBlock();
  Operation *last = block->empty() ? nullptr : &block->back();
  if (failed(node.getGraphImporter().importSubgraph(branch, outputs)))
    return failure();
  first =
      last ? last->getNextNode() : (block->empty() ? nullptr : &block->front());
  return success();
}

LogicalResult importIf(NodeImporter &node) {
  // Its branches (GRAPH attributes) were left to this handler; If has no
  // other attribute.
  if (!node.getAttributes().empty())
    return node.emitAttributeError(
               node.getAttributes().begin()->getName().getValue())
           << "is not an attribute of If";
  const onnx::GraphProto *thenBranch = nullptr, *elseBranch = nullptr;
  for (const onnx::AttributeProto &attr : node.getNode().attribute()) {
    if (attr.name() == "then_branch")
      thenBranch = &attr.g();
    else if (attr.name() == "else_branch")
      elseBranch = &attr.g();
  }
  // Validation (Model.cpp) made sure of both.
  if (!thenBranch || !elseBranch)
    return node.emitError() << "has no then_branch or else_branch";

  Value cond = node.getOperands()[0];
  auto condType = dyn_cast<RankedTensorType>(cond.getType());
  if (!condType || !condType.getElementType().isInteger(1))
    return node.emitError()
           << "input 'cond' is " << condType << "; If takes a bool";
  if (condType.hasStaticShape() && condType.getNumElements() != 1)
    return node.emitError()
           << "input 'cond' is " << condType << "; If takes a single bool";

  ConstantFolder folder;
  if (auto folded = moec::moe::getFoldableElements(folder.fold(cond));
      folded && folded.getNumElements() == 1 &&
      folded.getElementType().isInteger(1)) {
    bool taken = *folded.getValues<bool>().begin();
    emitRemark(node.getLoc())
        << "the condition folds to " << (taken ? "true" : "false") << ": "
        << (taken ? "then_branch" : "else_branch")
        << " imported inline, the other branch dropped";
    SmallVector<Value> outputs;
    Operation *first;
    if (failed(importBranch(node, taken ? *thenBranch : *elseBranch, outputs,
                            first)))
      return failure();
    return node.setResults(outputs);
  }

  SmallVector<Value> thenOutputs, elseOutputs;
  Operation *thenFirst, *elseFirst;
  if (failed(importBranch(node, *thenBranch, thenOutputs, thenFirst)) ||
      failed(importBranch(node, *elseBranch, elseOutputs, elseFirst)))
    return failure();
  for (auto [i, pair] : llvm::enumerate(llvm::zip(thenOutputs, elseOutputs)))
    if (failed(checkSameShape(node, i, std::get<0>(pair), std::get<1>(pair))))
      return failure();
  // The else branch's ops follow the then branch's.
  if (failed(checkUnconditional(node, "then_branch", thenFirst, elseFirst,
                                folder)) ||
      failed(
          checkUnconditional(node, "else_branch", elseFirst, nullptr, folder)))
    return failure();

  OpBuilder &builder = node.getBuilder();
  Location loc = node.getLoc();
  // One element of any shape ([1], [1, 1]) selects the whole output: as a
  // scalar it broadcasts without changing the output's shape. A cond of
  // another element count fails this Reshape at run time, as onnxruntime's
  // If fails.
  Value scalar = moec::moe::ReshapeOp::create(
      builder, loc, RankedTensorType::get({}, builder.getI1Type()), cond,
      node.createI64Constant({}));
  SmallVector<Value> outputs;
  for (auto [thenValue, elseValue] : llvm::zip(thenOutputs, elseOutputs))
    outputs.push_back(moec::moe::WhereOp::create(
        builder, loc, thenValue.getType(), scalar, thenValue, elseValue));
  if (failed(mlir::verify(scalar.getDefiningOp())) ||
      llvm::any_of(outputs, [](Value output) {
        return failed(mlir::verify(output.getDefiningOp()));
      }))
    return failure();
  emitRemark(loc) << "the condition does not fold: both branches imported and "
                     "each output selected with Where";
  return node.setResults(outputs);
}

} // namespace

void moec::onnx_import::populateControlFlowImports(OpImportTable &table) {
  for (int64_t version : {13, 16, 19, 21, 23, 24})
    table.onOp("If", version, "cond", importIf, StringRef());
}
