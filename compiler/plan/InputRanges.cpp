//===- InputRanges.cpp - Value ranges of a plan's integer inputs ----------===//

#include "compiler/plan/InputRanges.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>

using namespace mlir;

std::optional<int64_t> moec::plan::getEmbeddingRows(Value input) {
  std::optional<int64_t> rows;
  SmallVector<Value> worklist = {input};
  // Graph inputs feed few ops; the bound keeps a pathological graph cheap.
  for (int visited = 0; !worklist.empty() && visited < 64; ++visited) {
    Value value = worklist.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (auto gather = dyn_cast<moe::GatherOp>(user)) {
        auto table = gather.getData().getDefiningOp<moe::ConstantOp>();
        auto type = dyn_cast<RankedTensorType>(gather.getData().getType());
        if (use.getOperandNumber() != 1 || !table || !type ||
            !type.hasStaticShape())
          continue;
        int64_t axis = gather.getAxis();
        if (axis < 0)
          axis += type.getRank();
        if (axis < 0 || axis >= type.getRank() || type.getDimSize(axis) < 1)
          continue;
        rows = std::min(rows.value_or(INT64_MAX), type.getDimSize(axis));
        continue;
      }
      // Ops that keep the values (only the shape changes).
      bool keepsValues =
          isa<moe::ReshapeOp, moe::FlattenOp, moe::SqueezeOp, moe::UnsqueezeOp>(
              user) &&
          use.getOperandNumber() == 0;
      if (auto cast = dyn_cast<moe::CastOp>(user))
        keepsValues = isa<IntegerType>(
            getElementTypeOrSelf(cast->getResult(0).getType()));
      if (keepsValues)
        worklist.push_back(user->getResult(0));
    }
  }
  return rows;
}
