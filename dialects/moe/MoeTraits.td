//===- MoeTraits.td - op categories the passes query -------*- tablegen -*-===//
//
// The one source of the op categories that several passes need: which ops are
// elementwise, which keep their first operand's shape, which the runtime may
// run in place and which the fused elementwise programs can express. An op
// states its categories in its ODS definition; passes ask
// `op->hasTrait<moe::OpTrait::...>()` instead of listing ops by hand. The C++
// side is dialects/moe/MoeTraits.h.
//
// Upstream's `Elementwise` and `SameOperandsAndResultShape` do not fit: the
// first requires every non-scalar operand to have the result's shape (no
// numpy broadcasting), and the verifiers of both would report a shape mismatch
// before the dialect's type inference does, changing its diagnostics. These
// traits have no verifier: the ops' own inference checks their shapes.
//
// There is no separate row-local trait: an elementwise op is row-local along
// every axis (broadcasting aside), and whether any other op is depends on
// its attributes (a softmax's or reduction's axis), which
// passes/RowIndependence.cpp decides per op.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRAITS_TD
#define MOE_TRAITS_TD

include "mlir/IR/OpBase.td"

class Moe_OpTrait<string name, list<Trait> traits = []>
    : NativeOpTrait<name, traits> {
  let cppNamespace = "::moec::moe::OpTrait";
}

/// Broadcasting elementwise: every tensor operand broadcasts (numpy rules) to
/// the shape of each result, and each result element depends only on the
/// operand elements at its broadcast index. Values flow through it row by
/// row along any axis; shape facts (the size of a dimension) flow from the
/// operand that is not 1 there.
def Moe_Elementwise : Moe_OpTrait<"Elementwise">;

/// Result 0 has operand 0's shape; further results (a normalisation's mean)
/// keep its dynamic dimensions at the same positions. Shape arithmetic may
/// read a result's dynamic dimension as the operand's.
def Moe_SameShapeAsFirst : Moe_OpTrait<"SameShapeAsFirst">;

/// The runtime's step may write output 0 over an input that it reads for the
/// last time (docs/plan-format.md, "Memory plan"): over any input of the
/// output's type for a `Moe_Elementwise` op, else over input 0 only.
def Moe_InPlaceable : Moe_OpTrait<"InPlaceable">;

/// Output 0 holds operand 0's elements in the same order under another shape,
/// so in place the step moves no data (Reshape and its kin).
def Moe_View : Moe_OpTrait<"View">;

/// The runtime's fused elementwise program has an instruction for this op on
/// f32 (dialects/moe/PlanStepAttrs.cpp, `getExprOp`), so moe-fuse-elementwise
/// may take it into a `moe.fused_elementwise` region.
def Moe_FusibleElementwise : Moe_OpTrait<"FusibleElementwise",
                                         [Moe_Elementwise]>;

#endif // MOE_TRAITS_TD
