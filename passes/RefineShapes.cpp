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

/// The join of the declared type `current` and the inferred type `inferred`:
/// every dimension static in either stays static. Returns null when the join
/// adds nothing or the two disagree (element type, rank or a static size),
/// which leaves the declared type to the verifier.
Type refineType(Type current, Type inferred) {
  auto from = dyn_cast<RankedTensorType>(current);
  auto to = dyn_cast<RankedTensorType>(inferred);
  if (!from || !to || from == to ||
      from.getElementType() != to.getElementType() ||
      from.getRank() != to.getRank())
    return {};
  SmallVector<int64_t> shape;
  bool changed = false;
  for (auto [a, b] : llvm::zip(from.getShape(), to.getShape())) {
    if (!ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) && a != b)
      return {};
    changed |= ShapedType::isDynamic(a) && !ShapedType::isDynamic(b);
    shape.push_back(ShapedType::isDynamic(a) ? b : a);
  }
  if (!changed)
    return {};
  return from.clone(shape);
}

struct RefineShapesPass
    : public moec::impl::MoeRefineShapesBase<RefineShapesPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    func.walk([&](InferTypeOpInterface op) {
      SmallVector<Type> inferred;
      if (failed(op.inferReturnTypes(op->getContext(), std::nullopt,
                                     op->getOperands(), op->getAttrDictionary(),
                                     op->getPropertiesStorage(),
                                     op->getRegions(), inferred)) ||
          inferred.size() != op->getNumResults())
        return;
      for (auto [result, type] : llvm::zip(op->getResults(), inferred))
        if (Type refined = refineType(result.getType(), type))
          result.setType(refined);
    });
    // The function's declared results follow what is actually returned.
    Operation *terminator = func.getBody().back().getTerminator();
    auto type = func.getFunctionType();
    SmallVector<Type> results(terminator->getOperandTypes());
    if (results != SmallVector<Type>(type.getResults()))
      func.setType(
          FunctionType::get(func.getContext(), type.getInputs(), results));
  }
};

} // namespace
