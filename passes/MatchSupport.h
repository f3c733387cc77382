//===- MatchSupport.h - helpers of the MoE pattern matchers -----*- C++ -*-===//
//
// Small predicates the MoE detection passes use to prove, op by op, that a
// subgraph has the form they rewrite: constant axes, scalar constants and the
// operands of commutative ops.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_MATCHSUPPORT_H
#define MOEC_PASSES_MATCHSUPPORT_H

#include "dialects/moe/GraphOpsSupport.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>

namespace moec {

/// Whether `axis` names dimension `expected` of a rank-`rank` tensor, also
/// when written as a negative axis.
inline bool isAxis(int64_t axis, int64_t expected, int64_t rank) {
  return axis == expected || axis + rank == expected;
}

/// Whether `value` is a constant integer list equal to `expected`, where an
/// entry may also be written relative to `rank` (a negative axis).
inline bool isConstAxes(mlir::Value value, llvm::ArrayRef<int64_t> expected,
                        int64_t rank) {
  std::optional<llvm::SmallVector<int64_t>> actual =
      moe::getConstantInts(value);
  if (!actual || actual->size() != expected.size())
    return false;
  for (auto [a, e] : llvm::zip(*actual, expected))
    if (!isAxis(a, e, rank))
      return false;
  return true;
}

/// The value of a single-element float constant, or nullopt.
inline std::optional<double> getScalarFloat(mlir::Value value) {
  mlir::Attribute attr;
  if (!value || !mlir::matchPattern(value, mlir::m_Constant(&attr)))
    return std::nullopt;
  auto dense = llvm::dyn_cast<mlir::DenseFPElementsAttr>(attr);
  if (!dense || dense.getNumElements() != 1)
    return std::nullopt;
  return (*dense.getValues<llvm::APFloat>().begin()).convertToDouble();
}

/// The operand of the commutative binary op `op` that is not `known`, or null
/// when `known` is neither.
template <typename OpTy> mlir::Value otherOperand(OpTy op, mlir::Value known) {
  if (op.getLhs() == known)
    return op.getRhs();
  if (op.getRhs() == known)
    return op.getLhs();
  return nullptr;
}

} // namespace moec

#endif // MOEC_PASSES_MATCHSUPPORT_H
