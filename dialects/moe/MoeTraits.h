//===- MoeTraits.h - op categories the passes query -------------*- C++ -*-===//
//
// The C++ side of dialects/moe/MoeTraits.td: marker traits, one per op
// category, that passes query with `op->hasTrait<moe::OpTrait::...>()`. What
// each category promises is documented in the .td.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECTS_MOE_MOETRAITS_H
#define MOEC_DIALECTS_MOE_MOETRAITS_H

#include "mlir/IR/OpDefinition.h"

namespace moec::moe::OpTrait {

/// Broadcasting elementwise (Moe_Elementwise).
template <typename ConcreteType>
class Elementwise : public mlir::OpTrait::TraitBase<ConcreteType, Elementwise> {
};

/// Result 0 has operand 0's shape (Moe_SameShapeAsFirst).
template <typename ConcreteType>
class SameShapeAsFirst
    : public mlir::OpTrait::TraitBase<ConcreteType, SameShapeAsFirst> {};

/// The runtime may write output 0 over an input (Moe_InPlaceable).
template <typename ConcreteType>
class InPlaceable : public mlir::OpTrait::TraitBase<ConcreteType, InPlaceable> {
};

/// Output 0 is operand 0's elements under another shape (Moe_View).
template <typename ConcreteType>
class View : public mlir::OpTrait::TraitBase<ConcreteType, View> {};

/// An f32 instruction of the fused elementwise programs
/// (Moe_FusibleElementwise).
template <typename ConcreteType>
class FusibleElementwise
    : public mlir::OpTrait::TraitBase<ConcreteType, FusibleElementwise> {};

/// The op's plan step (Moe_PlanStepKind): the ODS trait declares the op's
/// `kPlanStepKind`, which PlanStepOpInterface's `getPlanStepKind()` returns.
template <typename ConcreteType>
class PlanStepKind
    : public mlir::OpTrait::TraitBase<ConcreteType, PlanStepKind> {};

} // namespace moec::moe::OpTrait

#endif // MOEC_DIALECTS_MOE_MOETRAITS_H
