//===- MoePlanStep.td - the runtime step of an op ----------*- tablegen -*-===//
//
// Which step of the runtime's plan an op becomes, stated in its ODS
// definition: `Moe_PlanStep<"Kind">` names the `OpKind` of
// runtime/format/plan.fbs, `Moe_PlanStepWithAttrs<"Kind">` also declares
// `getPlanStepAttrs`, which the op defines in dialects/moe/PlanStepAttrs.cpp
// to fill the step's attribute table. The plan emitter reads both through
// `PlanStepOpInterface` and knows no op by name; an op without the interface
// has no runtime step and cannot be part of a plan. The C++ side is
// dialects/moe/MoeTraits.h (the kind) and MoePlanStep.h.inc (the interface).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_PLAN_STEP_TD
#define MOE_PLAN_STEP_TD

include "mlir/IR/OpBase.td"

def Moe_PlanStepOpInterface : OpInterface<"PlanStepOpInterface"> {
  let cppNamespace = "::moec::moe";
  let description = [{
    An op the runtime runs as one step of a plan (docs/plan-format.md): its
    step kind and the attributes of that step. The step's inputs are the
    op's operands in order (an absent optional operand is -1) and its
    outputs the op's results.
  }];
  let methods = [
    StaticInterfaceMethod<[{
        The name of the step's kind, an `OpKind` of runtime/format/plan.fbs.
      }], "::llvm::StringRef", "getPlanStepKind", (ins), [{}],
      [{ return ConcreteOp::kPlanStepKind; }]>,
    InterfaceMethod<[{
        Fills the step's attribute table into `attrs` (a
        `moert::fb::AttrsUnion`); a step without attributes leaves it empty.
        Reports its own errors.
      }], "::llvm::LogicalResult", "getPlanStepAttrs",
      (ins "::moert::fb::AttrsUnion &":$attrs), [{}],
      [{ return ::mlir::success(); }]>,
  ];
}

/// The `kPlanStepKind` of an op with a plan step, which its
/// `getPlanStepKind()` returns.
class Moe_PlanStepKind<string kind>
    : NativeOpTrait<"PlanStepKind", [],
        "static constexpr ::llvm::StringLiteral kPlanStepKind{\"" # kind
        # "\"};"> {
  let cppNamespace = "::moec::moe::OpTrait";
}

/// The op runs as a plan step of kind `kind`, without attributes.
class Moe_PlanStep<string kind>
    : TraitList<[Moe_PlanStepOpInterface, Moe_PlanStepKind<kind>]>;

/// The op runs as a plan step of kind `kind` with attributes, which its
/// `getPlanStepAttrs` (dialects/moe/PlanStepAttrs.cpp) fills.
class Moe_PlanStepWithAttrs<string kind>
    : TraitList<[DeclareOpInterfaceMethods<Moe_PlanStepOpInterface,
                                           ["getPlanStepAttrs"]>,
                 Moe_PlanStepKind<kind>]>;

#endif // MOE_PLAN_STEP_TD
