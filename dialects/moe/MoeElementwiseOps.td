//===- MoeElementwiseOps.td - elementwise graph ops --------*- tablegen -*-===//
//
// The ONNX elementwise operators: unary math, broadcasting binary
// arithmetic, comparisons, logic, the variadic Sum/Min/Max, Where, Clip,
// Cast. They follow the importer contract of MoeGraphOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_ELEMENTWISE_OPS_TD
#define MOE_ELEMENTWISE_OPS_TD

include "dialects/moe/MoeGraphOps.td"

/// An elementwise op of one operand whose result has the operand's type. The
/// runtime runs every one in place, as the plan step named `onnxName`;
/// `traits` adds Moe_FusibleElementwise for those the fused programs have an
/// instruction for (all but Sign and Not).
class Moe_UnaryOp<string mnemonic, string onnxName, Type type, string what,
                  list<Trait> traits = [Moe_FusibleElementwise]>
    : Moe_GraphOp<mnemonic, !listconcat([Moe_PlanStep<onnxName>,
                                         Moe_Elementwise, Moe_SameShapeAsFirst,
                                         Moe_InPlaceable], traits),
                  Moe_InferWith<"::moec::moe::inferSameAsFirst">.body> {
  let summary = "Elementwise " # what # " (ONNX " # onnxName # ")";
  let description = "Computes " # what # " of every element of `input` as "
    # "ONNX `" # onnxName # "` does; the result has the operand's type.\n\n"
    # "Example:\n```mlir\n%y = moe." # mnemonic
    # " %x : (tensor<?x16xf32>) -> tensor<?x16xf32>\n```";
  let arguments = (ins type:$input);
  let results = (outs type:$output);
  let hasFolder = 1;
}

/// A broadcasting elementwise op of two operands of one element type, the
/// plan step named `onnxName`.
class Moe_BinaryOp<string mnemonic, string onnxName, Type type, string what>
    : Moe_GraphOp<mnemonic, [Moe_PlanStep<onnxName>, Moe_Elementwise,
                             Moe_InPlaceable, Moe_FusibleElementwise],
                  Moe_InferWith<"::moec::moe::inferBroadcast">.body> {
  let summary = "Broadcasting elementwise " # what # " (ONNX " # onnxName # ")";
  let description = "Computes `lhs " # what # " rhs` elementwise with "
    # "multidirectional (numpy) broadcasting, as ONNX `" # onnxName # "` does. "
    # "Both operands have the same element type, which the result keeps.\n\n"
    # "Example:\n```mlir\n%z = moe." # mnemonic
    # " %x, %y : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>\n```";
  let arguments = (ins type:$lhs, type:$rhs);
  let results = (outs type:$output);
  let hasFolder = 1;
}

/// A broadcasting comparison or logical op; the result is a bool tensor. The
/// plan step is named `onnxName`.
class Moe_PredicateOp<string mnemonic, string onnxName, Type type, string what,
                      list<Trait> traits = []>
    : Moe_GraphOp<mnemonic, !listconcat([Moe_PlanStep<onnxName>,
                                         Moe_Elementwise], traits),
                  Moe_InferWith<"::moec::moe::inferBroadcastPredicate">.body> {
  let summary = "Broadcasting elementwise " # what # " (ONNX " # onnxName # ")";
  let description = "Computes `lhs " # what # " rhs` elementwise with "
    # "multidirectional (numpy) broadcasting into an `i1` tensor, as ONNX `"
    # onnxName # "` does. Both operands have the same element type.\n\n"
    # "Example:\n```mlir\n%b = moe." # mnemonic
    # " %x, %y : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi1>\n```";
  let arguments = (ins type:$lhs, type:$rhs);
  let results = (outs Moe_BoolTensor:$output);
  let hasFolder = 1;
}

/// A broadcasting elementwise op over any number of operands (Sum, Min, Max),
/// the plan step named `onnxName`.
class Moe_VariadicOp<string mnemonic, string onnxName, string what,
                     list<Trait> traits = []>
    : Moe_GraphOp<mnemonic, !listconcat([Moe_PlanStep<onnxName>,
                                         Moe_Elementwise, Moe_InPlaceable],
                                        traits),
                  Moe_InferWith<"::moec::moe::inferBroadcast">.body> {
  let summary = "Broadcasting elementwise " # what # " of N tensors (ONNX "
    # onnxName # ")";
  let description = "Computes the elementwise " # what # " of one or more "
    # "operands of one element type with multidirectional broadcasting, as "
    # "ONNX `" # onnxName # "` does.\n\n"
    # "Example:\n```mlir\n%m = moe." # mnemonic # " %a, %b, %c : "
    # "(tensor<4x1xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>\n```";
  let arguments = (ins Variadic<Moe_NumericTensor>:$inputs);
  let results = (outs Moe_NumericTensor:$output);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops
//===----------------------------------------------------------------------===//

def Moe_SqrtOp : Moe_UnaryOp<"sqrt", "Sqrt", Moe_FloatTensor, "the square root">;
def Moe_ReciprocalOp : Moe_UnaryOp<"reciprocal", "Reciprocal", Moe_FloatTensor,
                                   "the reciprocal `1 / x`">;
def Moe_NegOp : Moe_UnaryOp<"neg", "Neg", Moe_SignedTensor, "the negation">;
def Moe_AbsOp : Moe_UnaryOp<"abs", "Abs", Moe_NumericTensor, "the absolute value">;
def Moe_ExpOp : Moe_UnaryOp<"exp", "Exp", Moe_FloatTensor, "the exponential">;
def Moe_LogOp : Moe_UnaryOp<"log", "Log", Moe_FloatTensor, "the natural logarithm">;
def Moe_TanhOp : Moe_UnaryOp<"tanh", "Tanh", Moe_FloatTensor,
                             "the hyperbolic tangent">;
def Moe_ErfOp : Moe_UnaryOp<"erf", "Erf", Moe_FloatTensor, "the error function">;
def Moe_SigmoidOp : Moe_UnaryOp<"sigmoid", "Sigmoid", Moe_FloatTensor,
                                "the logistic sigmoid `1 / (1 + exp(-x))`">;
def Moe_ReluOp : Moe_UnaryOp<"relu", "Relu", Moe_SignedTensor, "`max(x, 0)`">;
def Moe_SinOp : Moe_UnaryOp<"sin", "Sin", Moe_FloatTensor, "the sine">;
def Moe_CosOp : Moe_UnaryOp<"cos", "Cos", Moe_FloatTensor, "the cosine">;
def Moe_FloorOp : Moe_UnaryOp<"floor", "Floor", Moe_FloatTensor,
                              "the largest integer not above x">;
def Moe_CeilOp : Moe_UnaryOp<"ceil", "Ceil", Moe_FloatTensor,
                             "the smallest integer not below x">;
def Moe_SoftplusOp : Moe_UnaryOp<"softplus", "Softplus", Moe_FloatTensor,
                                 "`log(exp(x) + 1)`">;
def Moe_SignOp : Moe_UnaryOp<"sign", "Sign", Moe_NumericTensor,
                             "the sign (-1, 0 or 1)", []>;
def Moe_NotOp : Moe_UnaryOp<"not", "Not", Moe_BoolTensor, "the logical negation",
                            []>;

def Moe_IsNaNOp : Moe_GraphOp<"is_nan", [Moe_PlanStep<"IsNaN">,
    Moe_Elementwise, Moe_SameShapeAsFirst]> {
  let summary = "Elementwise test for NaN (ONNX IsNaN, opset 20)";
  let description = [{
    Returns an `i1` tensor of the input's shape that is true where the input
    is NaN. torch's SDPA export masks fully masked rows with
    `Where(IsNaN(x), 0, x)`.

    Example:
    ```mlir
    %b = moe.is_nan %x : (tensor<?x16xf32>) -> tensor<?x16xi1>
    ```
  }];
  let arguments = (ins Moe_FloatTensor:$input);
  let results = (outs Moe_BoolTensor:$output);
}

def Moe_GeluOp : Moe_GraphOp<"gelu", [Moe_PlanStepWithAttrs<"Gelu">,
    Moe_Elementwise, Moe_SameShapeAsFirst,
                                      Moe_InPlaceable, Moe_FusibleElementwise],
    Moe_InferWith<"::moec::moe::inferSameAsFirst">.body> {
  let summary = "Gaussian error linear unit (ONNX Gelu, opset 20)";
  let description = [{
    Computes `0.5 * x * (1 + erf(x / sqrt(2)))` elementwise; with
    `approximate = "tanh"`, the tanh approximation
    `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`.

    Example:
    ```mlir
    %y = moe.gelu %x {approximate = "tanh"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_FloatTensor:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs Moe_FloatTensor:$output);
  let hasVerifier = 1;
}

def Moe_CastOp : Moe_GraphOp<"cast", [Moe_PlanStepWithAttrs<"Cast">,
    Moe_Elementwise, Moe_SameShapeAsFirst]> {
  let summary = "Converts elements to another type (ONNX Cast, opset 21)";
  let description = [{
    Converts every element of `input` to the element type `to` (the ONNX data
    type as an MLIR type: `i1` for bool, `i64` for int64, `ui8` for uint8).
    Floats convert to integers by truncation toward zero; anything non-zero
    converts to `true`. `saturate` only affects float8 targets, which moec does
    not support, and is kept for fidelity.

    Example:
    ```mlir
    %i = moe.cast %x {to = i64} : (tensor<?xi32>) -> tensor<?xi64>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, TypeAttrOf<Moe_ElementType>:$to,
                       DefaultValuedAttr<I64Attr, "1">:$saturate);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
}

def Moe_CastLikeOp : Moe_GraphOp<"cast_like", [Moe_PlanStep<"CastLike">,
    Moe_SameShapeAsFirst]> {
  let summary = "Converts elements to another tensor's element type "
                "(ONNX CastLike, opset 21)";
  let description = [{
    `moe.cast` to the element type of `target_type`, whose values are ignored.

    Example:
    ```mlir
    %y = moe.cast_like %x, %t : (tensor<?xf32>, tensor<f16>) -> tensor<?xf16>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, Moe_Tensor:$target_type,
                       DefaultValuedAttr<I64Attr, "1">:$saturate);
  let results = (outs Moe_Tensor:$output);
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise binary, comparison, logical and variadic ops
//===----------------------------------------------------------------------===//

def Moe_AddOp : Moe_BinaryOp<"add", "Add", Moe_NumericTensor, "+">;
def Moe_SubOp : Moe_BinaryOp<"sub", "Sub", Moe_NumericTensor, "-">;
def Moe_MulOp : Moe_BinaryOp<"mul", "Mul", Moe_NumericTensor, "*">;
def Moe_DivOp : Moe_BinaryOp<"div", "Div", Moe_NumericTensor, "/">;

def Moe_PowOp : Moe_GraphOp<"pow", [Moe_PlanStep<"Pow">,
    Moe_Elementwise, Moe_InPlaceable,
                                    Moe_FusibleElementwise],
    Moe_InferWith<"::moec::moe::inferBroadcastFirstType">.body> {
  let summary = "Broadcasting elementwise power (ONNX Pow, opset 15)";
  let description = [{
    Computes `base ^ exponent` elementwise with multidirectional broadcasting;
    the exponent may have a different numeric type, the result has the base's.

    Example:
    ```mlir
    %y = moe.pow %x, %two : (tensor<?x64xf32>, tensor<f32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$base, Moe_NumericTensor:$exponent);
  let results = (outs Moe_NumericTensor:$output);
  let hasFolder = 1;
}

def Moe_ModOp : Moe_GraphOp<"mod", [Moe_PlanStepWithAttrs<"Mod">,
    Moe_Elementwise, Moe_InPlaceable],
    Moe_InferWith<"::moec::moe::inferBroadcast">.body> {
  let summary = "Broadcasting elementwise remainder (ONNX Mod, opset 13)";
  let description = [{
    Computes the remainder of `lhs / rhs` elementwise with broadcasting. With
    `fmod = 0` (integers only) the remainder takes the sign of the divisor
    (Python `%`); with `fmod = 1` it takes the sign of the dividend (C `fmod`),
    which ONNX requires for floats.

    Example:
    ```mlir
    %r = moe.mod %a, %b : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$lhs, Moe_NumericTensor:$rhs,
                       DefaultValuedAttr<I64Attr, "0">:$fmod);
  let results = (outs Moe_NumericTensor:$output);
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Moe_EqualOp : Moe_PredicateOp<"equal", "Equal", Moe_Tensor, "==">;
def Moe_LessOp : Moe_PredicateOp<"less", "Less", Moe_NumericTensor, "<">;
def Moe_LessOrEqualOp
    : Moe_PredicateOp<"less_or_equal", "LessOrEqual", Moe_NumericTensor, "<=">;
def Moe_GreaterOp : Moe_PredicateOp<"greater", "Greater", Moe_NumericTensor, ">">;
def Moe_GreaterOrEqualOp : Moe_PredicateOp<"greater_or_equal",
    "GreaterOrEqual", Moe_NumericTensor, ">=">;
def Moe_AndOp : Moe_PredicateOp<"and", "And", Moe_BoolTensor, "and",
                                [Moe_InPlaceable]>;
def Moe_OrOp : Moe_PredicateOp<"or", "Or", Moe_BoolTensor, "or",
                               [Moe_InPlaceable]>;

def Moe_SumOp : Moe_VariadicOp<"sum", "Sum", "sum">;
def Moe_MinOp : Moe_VariadicOp<"min", "Min", "minimum",
                               [Moe_FusibleElementwise]>;
def Moe_MaxOp : Moe_VariadicOp<"max", "Max", "maximum",
                               [Moe_FusibleElementwise]>;

def Moe_WhereOp : Moe_GraphOp<"where", [Moe_PlanStep<"Where">,
    Moe_Elementwise, Moe_InPlaceable],
    Moe_InferWith<"::moec::moe::inferWhere">.body> {
  let summary = "Broadcasting elementwise select (ONNX Where, opset 16)";
  let description = [{
    Picks `x` where `condition` is true and `y` elsewhere, broadcasting all
    three operands together. `x` and `y` have the result's element type.

    Example:
    ```mlir
    %s = moe.where %c, %x, %y
        : (tensor<2xi1>, tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
    ```
  }];
  let arguments = (ins Moe_BoolTensor:$condition, Moe_Tensor:$x, Moe_Tensor:$y);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
}

def Moe_ClipOp : Moe_GraphOp<"clip", [Moe_PlanStep<"Clip">,
    AttrSizedOperandSegments, Moe_Elementwise,
                                     Moe_SameShapeAsFirst, Moe_InPlaceable],
    Moe_InferWith<"::moec::moe::inferSameAsFirst">.body> {
  let summary = "Clamps elements into [min, max] (ONNX Clip, opset 13)";
  let description = [{
    Clamps every element of `input` to the optional scalar bounds `min` and
    `max` (of the input's element type); an absent bound does not clamp.

    Example:
    ```mlir
    %y = moe.clip %x min %lo max %hi
        : (tensor<?x8xf32>, tensor<f32>, tensor<f32>) -> tensor<?x8xf32>
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$input,
                       Optional<Moe_NumericTensor>:$min,
                       Optional<Moe_NumericTensor>:$max);
  let results = (outs Moe_NumericTensor:$output);
  let assemblyFormat = [{
    $input (`min` $min^)? (`max` $max^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // MOE_ELEMENTWISE_OPS_TD
