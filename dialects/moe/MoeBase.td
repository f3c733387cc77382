//===- MoeBase.td - moe dialect definition -----------------*- tablegen -*-===//
//
// The `moe` dialect: ONNX-semantics graph ops on tensors with a symbolic token
// dimension, plus the sparse-model ops (router, dispatch, experts, combine,
// all_to_all) that the detection passes produce.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_BASE_TD
#define MOE_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "dialects/moe/MoeTraits.td"
include "dialects/moe/MoePlanStep.td"

def Moe_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::moec::moe";
  let summary = "Graph and sparse Mixture-of-Experts operations";
  let description = [{
    The `moe` dialect holds a model imported from ONNX. Graph ops carry ONNX
    semantics (broadcasting, negative axes, integer index tensors) on builtin
    ranked tensors whose token dimension is dynamic (`?`) and bounded at compile
    time. The sparse ops (`moe.router`, `moe.dispatch`, `moe.experts`,
    `moe.combine`, `moe.all_to_all`) are what the detection passes turn a
    recognised Mixture-of-Experts layer into.
  }];
  let hasConstantMaterializer = 1;
  let useDefaultAttributePrinterParser = 1;
}

/// Base class of every op in the dialect.
class Moe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Moe_Dialect, mnemonic, traits>;

/// Element types a graph tensor may hold (ONNX float, integer and bool types).
def Moe_ElementType : AnyTypeOf<[F16, BF16, F32, F64, I1, I8, I16, I32, I64,
                                 UI8, UI16, UI32, UI64]>;
def Moe_Tensor : RankedTensorOf<[Moe_ElementType]>;
def Moe_FloatTensor : RankedTensorOf<[F16, BF16, F32, F64]>;
def Moe_IndexTensor : RankedTensorOf<[I32, I64]>;
def Moe_I64Tensor : RankedTensorOf<[I64]>;
def Moe_BoolTensor : RankedTensorOf<[I1]>;

/// How a router turns logits into expert scores.
def Moe_ScoreFunction : I32EnumAttr<"ScoreFunction", "router score function", [
    I32EnumAttrCase<"Softmax", 0, "softmax">,
    I32EnumAttrCase<"Sigmoid", 1, "sigmoid">
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::moec::moe";
}
def Moe_ScoreFunctionAttr : EnumAttr<Moe_Dialect, Moe_ScoreFunction, "score_function">;

/// An f32 attribute that is zero or positive (not NaN): a normalisation's
/// epsilon, which the runtime also refuses when negative.
def Moe_NonNegativeF32Attr : ConfinedAttr<F32Attr, [AttrConstraint<
    CPred<"::llvm::cast<::mlir::FloatAttr>($_self).getValueAsDouble() >= 0">,
    "whose value is non-negative">]>;

#endif // MOE_BASE_TD
