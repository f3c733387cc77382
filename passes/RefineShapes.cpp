//===- RefineShapes.cpp - re-infer result types after folding -------------===//

#include "passes/Passes.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

namespace moec {
#define GEN_PASS_DEF_MOEREFINESHAPES
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace {

/// True when `refined` is a valid refinement of `current`: same element type
/// and rank, and every static dimension of `current` kept.
bool isRefinement(Type current, Type refined) {
  auto from = dyn_cast<RankedTensorType>(current);
  auto to = dyn_cast<RankedTensorType>(refined);
  if (!from || !to || from == to)
    return false;
  if (from.getElementType() != to.getElementType() ||
      from.getRank() != to.getRank())
    return false;
  for (auto [a, b] : llvm::zip(from.getShape(), to.getShape()))
    if (!ShapedType::isDynamic(a) && a != b)
      return false;
  return true;
}

struct RefineShapesPass
    : public moec::impl::MoeRefineShapesBase<RefineShapesPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    func.walk([&](InferTypeOpInterface op) {
      SmallVector<Type> inferred;
      if (failed(op.inferReturnTypes(
              op->getContext(), op->getLoc(), op->getOperands(),
              op->getAttrDictionary(), op->getPropertiesStorage(),
              op->getRegions(), inferred)) ||
          inferred.size() != op->getNumResults())
        return;
      for (auto [result, type] : llvm::zip(op->getResults(), inferred))
        if (isRefinement(result.getType(), type))
          result.setType(type);
    });
    // The function's declared results follow what is actually returned.
    Operation *terminator = func.getBody().back().getTerminator();
    auto type = func.getFunctionType();
    SmallVector<Type> results(terminator->getOperandTypes());
    if (results != SmallVector<Type>(type.getResults()))
      func.setType(FunctionType::get(func.getContext(), type.getInputs(),
                                     results));
  }
};

} // namespace
