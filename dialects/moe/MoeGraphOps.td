//===- MoeGraphOps.td - ONNX-semantics graph ops -----------*- tablegen -*-===//
//
// One op per supported ONNX operator. The contract with the ONNX importer,
// which builds these ops generically from a NodeProto:
//
//  * Name: `moe.` + the ONNX op type in snake_case: an underscore goes before
//    every upper-case letter that follows a lower-case letter or digit, or that
//    starts a capitalised word after a run of capitals, then everything is
//    lower-cased. An acronym stays one word (Add -> moe.add, MatMul ->
//    moe.mat_mul, ArgMax -> moe.arg_max, TopK -> moe.top_k, GatherND ->
//    moe.gather_nd, CastLike -> moe.cast_like, LessOrEqual ->
//    moe.less_or_equal, ConstantOfShape -> moe.constant_of_shape,
//    SimplifiedLayerNormalization -> moe.simplified_layer_normalization).
//    ONNX `Constant` and initializers become `moe.constant`.
//  * Operands: the ONNX inputs in order, in the newest supported opset's form
//    (up to opset 21; older opsets are upgraded by the importer, e.g. an `axes`
//    attribute becomes an operand). An optional ONNX input is an `Optional<>`
//    operand, a variadic one a `Variadic<>` operand. An op with more than one
//    optional/variadic operand has `operandSegmentSizes` (1 for a present
//    input, 0 for an absent one).
//  * Attributes: ONNX names, with INT -> I64Attr, FLOAT -> F32Attr, INTS ->
//    DenseI64ArrayAttr, FLOATS -> DenseF32ArrayAttr, STRING -> StrAttr,
//    TENSOR -> ElementsAttr. Exceptions: a data-type attribute (Cast's `to`) is
//    a TypeAttr holding the MLIR element type (bool -> i1, int64 -> i64,
//    uint8 -> ui8, float -> f32); ConstantOfShape's `value` is an optional
//    1-element ElementsAttr.
//  * Results: the ONNX outputs in order. Optional ONNX outputs are always
//    present (LayerNormalization has 3 results, SimplifiedLayerNormalization
//    2); Split has one result per node output.
//  * Result types are inferred (InferTypeOpInterface): inference reads
//    constant operands (shapes, axes, k) through `moe.constant`, `moe.dim`,
//    `moe.shape`, `moe.concat` and friends, and fails with a diagnostic on
//    inconsistent input. Declared result types need only be compatible with the
//    inferred ones (same element type and rank, static sizes agree), so a type
//    may be more or less static than what inference finds.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_GRAPH_OPS_TD
#define MOE_GRAPH_OPS_TD

include "dialects/moe/MoeBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

/// ONNX numeric types (everything but bool).
def Moe_NumericTensor : RankedTensorOf<[F16, BF16, F32, F64, I8, I16, I32, I64,
                                        UI8, UI16, UI32, UI64]>;
/// Numeric types with a sign (Neg, Relu).
def Moe_SignedTensor : RankedTensorOf<[F16, BF16, F32, F64, I8, I16, I32, I64]>;
/// Types Range and Clip-like scalar arithmetic work on.
def Moe_ScalarTensor : RankedTensorOf<[F16, BF16, F32, F64, I16, I32, I64]>;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

/// A side-effect-free graph op whose result types follow from its operands and
/// attributes. `inferDef` optionally defines `inferReturnTypes` for a whole op
/// family; ops without it define it in C++.
class Moe_GraphOp<string mnemonic, list<Trait> traits = [], code inferDef = "">
    : Moe_Op<mnemonic, !listconcat(traits,
        [Pure, InferTypeOpAdaptorWithIsCompatible])> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange lhs,
                                            ::mlir::TypeRange rhs) {
      return ::moec::moe::areCompatibleTypes(lhs, rhs);
    }
  }] # inferDef;
}

/// Defines `inferReturnTypes` as a call to `fn(location, adaptor, types)`.
class Moe_InferWith<string fn> {
  code body = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> location,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return }] # fn # [{(location, adaptor.getOperands(), types);
    }
  }];
}

/// An elementwise op of one operand whose result has the operand's type. The
/// runtime runs every one in place; `traits` adds Moe_FusibleElementwise for
/// those the fused programs have an instruction for (all but Sign and Not).
class Moe_UnaryOp<string mnemonic, string onnxName, Type type, string what,
                  list<Trait> traits = [Moe_FusibleElementwise]>
    : Moe_GraphOp<mnemonic, !listconcat([Moe_Elementwise, Moe_SameShapeAsFirst,
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

/// A broadcasting elementwise op of two operands of one element type.
class Moe_BinaryOp<string mnemonic, string onnxName, Type type, string what>
    : Moe_GraphOp<mnemonic, [Moe_Elementwise, Moe_InPlaceable,
                             Moe_FusibleElementwise], Moe_InferWith<"::moec::moe::inferBroadcast">.body> {
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

/// A broadcasting comparison or logical op; the result is a bool tensor.
class Moe_PredicateOp<string mnemonic, string onnxName, Type type, string what,
                      list<Trait> traits = []>
    : Moe_GraphOp<mnemonic, !listconcat([Moe_Elementwise], traits),
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

/// A broadcasting elementwise op over any number of operands (Sum, Min, Max).
class Moe_VariadicOp<string mnemonic, string onnxName, string what,
                     list<Trait> traits = []>
    : Moe_GraphOp<mnemonic, !listconcat([Moe_Elementwise, Moe_InPlaceable],
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

/// A reduction with an optional `axes` operand (ReduceSum opset 13, the others
/// opset 18) over tensors of `type`.
class Moe_ReduceOp<string mnemonic, string onnxName, string what,
                   Type type = Moe_NumericTensor>
    : Moe_GraphOp<mnemonic, [], [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> location,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::moec::moe::inferReduction(
          location, adaptor.getData(), adaptor.getAxes(), adaptor.getKeepdims(),
          adaptor.getNoopWithEmptyAxes(), types);
    }
    ::llvm::LogicalResult $cppClass::verify() {
      return ::moec::moe::verifyReduction(getOperation(), getKeepdims(),
                                          getNoopWithEmptyAxes());
    }
  }]> {
  let summary = "Reduces a tensor by " # what # " (ONNX " # onnxName # ")";
  let description = "Reduces `data` by " # what # " over the dimensions in the "
    # "optional 1-D `axes` operand (negative axes count from the back). "
    # "Without axes, all dimensions are reduced unless `noop_with_empty_axes` "
    # "is 1, which makes the op an identity. `keepdims` keeps reduced "
    # "dimensions as size 1.\n\n"
    # "Example:\n```mlir\n%s = moe." # mnemonic # " %x, %axes {keepdims = 0 : i64} "
    # ": (tensor<?x8x16xf32>, tensor<1xi64>) -> tensor<?x8xf32>\n```";
  let arguments = (ins type:$data, Optional<Moe_I64Tensor>:$axes,
                       DefaultValuedAttr<I64Attr, "1">:$keepdims,
                       DefaultValuedAttr<I64Attr, "0">:$noop_with_empty_axes);
  let results = (outs type:$output);
  let hasVerifier = 1;
}

/// Softmax-like ops normalising along one axis.
class Moe_SoftmaxOp<string mnemonic, string onnxName, string what>
    : Moe_GraphOp<mnemonic, [Moe_SameShapeAsFirst, Moe_InPlaceable],
                  Moe_InferWith<"::moec::moe::inferSameAsFirst">.body # [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::moec::moe::verifyAxis(getOperation(), "axis", getAxis(),
                                     getInput().getType().getRank());
    }
  }]> {
  let summary = what # " along one axis (ONNX " # onnxName # ", opset 13)";
  let description = "Computes " # what # " of `input` along dimension `axis` "
    # "(negative counts from the back).\n\n"
    # "Example:\n```mlir\n%p = moe." # mnemonic # " %logits {axis = -1 : i64} "
    # ": (tensor<?x8xf32>) -> tensor<?x8xf32>\n```";
  let arguments = (ins Moe_FloatTensor:$input,
                       DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs Moe_FloatTensor:$output);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Constants and shape values
//===----------------------------------------------------------------------===//

def Moe_ConstantOp : Moe_Op<"constant",
    [ConstantLike, Pure, DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "A constant tensor (ONNX Constant or an initializer)";
  let description = [{
    Holds a constant tensor. Small constants (shape arithmetic, indices) are
    dense elements; weights are `dense_resource` blobs that reference the
    model's memory-mapped data instead of copying it.

    Example:
    ```mlir
    %0 = moe.constant dense<[1, 2]> : tensor<2xi64>
    %w = moe.constant dense_resource<w_gate> : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Moe_Tensor:$output);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Moe_DimOp : Moe_GraphOp<"dim"> {
  let summary = "One dimension of a tensor's shape as a scalar i64 tensor";
  let description = [{
    The symbolic form of `Gather(Shape(x), index)` with a scalar index: the
    size of dimension `index` of `input` as a `tensor<i64>`. Canonicalisation
    produces it for dynamic dimensions (the token count) and folds it to a
    constant for static ones. `moe.unsqueeze` turns it into the 1-element
    vector that `moe.concat` assembles shapes from.

    Example:
    ```mlir
    %t = moe.dim %x, 0 : tensor<?x16xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, I64Attr:$index);
  let results = (outs 0DTensorOf<[I64]>:$output);
  let assemblyFormat = "$input `,` $index attr-dict `:` type($input)";
  let hasFolder = 1;
}

def Moe_ShapeOp : Moe_GraphOp<"shape"> {
  let summary = "The shape of a tensor as a 1-D i64 tensor (ONNX Shape, opset 21)";
  let description = [{
    Returns dimensions `[start, end)` of the shape of `data` (all of them by
    default). Negative `start`/`end` count from the back and out-of-range
    values are clamped, as in ONNX. Folds to a constant when those dimensions
    are static.

    Example:
    ```mlir
    %s = moe.shape %x : (tensor<?x16xf32>) -> tensor<2xi64>
    %d = moe.shape %x {start = 1 : i64} : (tensor<?x16xf32>) -> tensor<1xi64>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data,
                       DefaultValuedAttr<I64Attr, "0">:$start,
                       OptionalAttr<I64Attr>:$end);
  let results = (outs 1DTensorOf<[I64]>:$output);
  let hasFolder = 1;
  let extraClassDeclaration = [{
    /// The normalised `[start, end)` range of dimensions this op returns.
    std::pair<int64_t, int64_t> getDimRange();
  }];
}

def Moe_SizeOp : Moe_GraphOp<"size"> {
  let summary = "Number of elements of a tensor (ONNX Size, opset 21)";
  let description = [{
    Returns the element count of `data` as a scalar `tensor<i64>`; folds to a
    constant when the shape is static.

    Example:
    ```mlir
    %n = moe.size %x : (tensor<4x16xf32>) -> tensor<i64>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data);
  let results = (outs 0DTensorOf<[I64]>:$output);
  let hasFolder = 1;
}

def Moe_ConstantOfShapeOp : Moe_GraphOp<"constant_of_shape"> {
  let summary = "A tensor of a given shape filled with one value "
                "(ONNX ConstantOfShape, opset 21)";
  let description = [{
    Creates a tensor whose shape is the 1-D i64 `input` and whose elements all
    equal the single element of `value` (a float 0 when absent); the result
    element type is `value`'s. With a constant shape it folds to a splat
    constant, which is O(1) in memory whatever its size.

    Example:
    ```mlir
    %z = moe.constant_of_shape %shape {value = dense<0> : tensor<1xi64>}
        : (tensor<2xi64>) -> tensor<?x16xi64>
    ```
  }];
  let arguments = (ins Moe_I64Tensor:$input, OptionalAttr<ElementsAttr>:$value);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
}

def Moe_RangeOp : Moe_GraphOp<"range"> {
  let summary = "An arithmetic sequence (ONNX Range, opset 11)";
  let description = [{
    Produces the 1-D tensor `start, start + delta, ...` up to but excluding
    `limit`, with `max(ceil((limit - start) / delta), 0)` elements. The three
    operands are scalars of the result's element type.

    Example:
    ```mlir
    %r = moe.range %start, %limit, %delta
        : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
    ```
  }];
  let arguments = (ins Moe_ScalarTensor:$start, Moe_ScalarTensor:$limit,
                       Moe_ScalarTensor:$delta);
  let results = (outs Moe_ScalarTensor:$output);
  let hasFolder = 1;
}

def Moe_IdentityOp : Moe_GraphOp<"identity",
    [Moe_Elementwise, Moe_SameShapeAsFirst, Moe_InPlaceable, Moe_View],
    Moe_InferWith<"::moec::moe::inferSameAsFirst">.body> {
  let summary = "Returns its operand (ONNX Identity, opset 21)";
  let description = [{
    Forwards `input` unchanged; always folded away.

    Example:
    ```mlir
    %y = moe.identity %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input);
  let results = (outs Moe_Tensor:$output);
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

def Moe_IsNaNOp : Moe_GraphOp<"is_nan", [Moe_Elementwise, Moe_SameShapeAsFirst]> {
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

def Moe_GeluOp : Moe_GraphOp<"gelu", [Moe_Elementwise, Moe_SameShapeAsFirst,
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

def Moe_CastOp : Moe_GraphOp<"cast", [Moe_Elementwise, Moe_SameShapeAsFirst]> {
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

def Moe_CastLikeOp : Moe_GraphOp<"cast_like", [Moe_SameShapeAsFirst]> {
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

def Moe_PowOp : Moe_GraphOp<"pow", [Moe_Elementwise, Moe_InPlaceable,
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

def Moe_ModOp : Moe_GraphOp<"mod", [Moe_Elementwise, Moe_InPlaceable],
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

def Moe_WhereOp : Moe_GraphOp<"where", [Moe_Elementwise, Moe_InPlaceable],
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

def Moe_ClipOp : Moe_GraphOp<"clip", [AttrSizedOperandSegments, Moe_Elementwise,
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

//===----------------------------------------------------------------------===//
// Normalisation, softmax and reductions
//===----------------------------------------------------------------------===//

def Moe_SoftmaxOp : Moe_SoftmaxOp<"softmax", "Softmax", "the softmax">;
def Moe_LogSoftmaxOp : Moe_SoftmaxOp<"log_softmax", "LogSoftmax",
                                     "the logarithm of the softmax">;

def Moe_ReduceSumOp : Moe_ReduceOp<"reduce_sum", "ReduceSum", "summation">;
def Moe_ReduceMeanOp : Moe_ReduceOp<"reduce_mean", "ReduceMean", "the mean">;
def Moe_ReduceMaxOp : Moe_ReduceOp<"reduce_max", "ReduceMax", "the maximum">;
def Moe_ReduceMinOp : Moe_ReduceOp<"reduce_min", "ReduceMin", "the minimum">;
def Moe_ReduceProdOp : Moe_ReduceOp<"reduce_prod", "ReduceProd",
                                    "the product (1 over no elements)">;
def Moe_ReduceL1Op : Moe_ReduceOp<"reduce_l1", "ReduceL1",
                                  "the sum of absolute values">;
def Moe_ReduceSumSquareOp : Moe_ReduceOp<"reduce_sum_square", "ReduceSumSquare",
                                         "the sum of squares">;
def Moe_ReduceL2Op : Moe_ReduceOp<"reduce_l2", "ReduceL2",
    "the square root of the sum of squares", Moe_FloatTensor>;
def Moe_ReduceLogSumOp : Moe_ReduceOp<"reduce_log_sum", "ReduceLogSum",
    "the logarithm of the sum (-inf over no elements)", Moe_FloatTensor>;
def Moe_ReduceLogSumExpOp : Moe_ReduceOp<"reduce_log_sum_exp",
    "ReduceLogSumExp",
    "the logarithm of the sum of exponentials, computed as "
    "`max + log(sum(exp(x - max)))` (-inf over no elements)", Moe_FloatTensor>;

def Moe_ArgMaxOp : Moe_GraphOp<"arg_max"> {
  let summary = "Index of the largest element along an axis (ONNX ArgMax, opset 13)";
  let description = [{
    Returns the i64 index of the maximum of `data` along `axis`; on ties the
    first index, or the last when `select_last_index` is 1. `keepdims` keeps
    the reduced dimension as size 1.

    Example:
    ```mlir
    %e = moe.arg_max %logits {axis = 1 : i64, keepdims = 0 : i64}
        : (tensor<?x8xf32>) -> tensor<?xi64>
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$data,
                       DefaultValuedAttr<I64Attr, "0">:$axis,
                       DefaultValuedAttr<I64Attr, "1">:$keepdims,
                       DefaultValuedAttr<I64Attr, "0">:$select_last_index);
  let results = (outs Moe_I64Tensor:$output);
  let hasVerifier = 1;
}

def Moe_CumSumOp : Moe_GraphOp<"cum_sum", [Moe_SameShapeAsFirst],
    Moe_InferWith<"::moec::moe::inferSameAsFirst">.body> {
  let summary = "Cumulative sum along an axis (ONNX CumSum, opset 14)";
  let description = [{
    Running sum of `x` along the dimension given by the scalar or 1-element
    `axis` operand. `exclusive = 1` excludes the current element, `reverse = 1`
    sums from the end.

    Example:
    ```mlir
    %c = moe.cum_sum %mask, %axis
        : (tensor<?x8xi64>, tensor<i64>) -> tensor<?x8xi64>
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$x, Moe_IndexTensor:$axis,
                       DefaultValuedAttr<I64Attr, "0">:$exclusive,
                       DefaultValuedAttr<I64Attr, "0">:$reverse);
  let results = (outs Moe_NumericTensor:$output);
  let hasVerifier = 1;
}

def Moe_TopKOp : Moe_GraphOp<"top_k"> {
  let summary = "The k largest or smallest elements along an axis "
                "(ONNX TopK, opset 11)";
  let description = [{
    Returns the `k` largest (`largest = 1`) or smallest elements of `input`
    along `axis` and their i64 indices; `k` is a 1-element i64 tensor. With
    `sorted = 1` they come in order. The `axis` dimension of both results is
    `k`, or dynamic when `k` is not a constant.

    Example:
    ```mlir
    %v, %i = moe.top_k %probs, %k {axis = -1 : i64}
        : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$input, Moe_I64Tensor:$k,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<I64Attr, "1">:$largest,
                       DefaultValuedAttr<I64Attr, "1">:$sorted);
  let results = (outs Moe_NumericTensor:$values, Moe_I64Tensor:$indices);
  let hasVerifier = 1;
}

def Moe_LayerNormalizationOp : Moe_GraphOp<"layer_normalization",
    [Moe_SameShapeAsFirst, Moe_InPlaceable]> {
  let summary = "Layer normalisation (ONNX LayerNormalization, opset 17)";
  let description = [{
    Normalises `x` over the dimensions from `axis` to the last to zero mean
    and unit variance (`epsilon` added to the variance), then scales by
    `scale` and adds the optional `bias` (both broadcastable to those
    dimensions). `mean` and `inv_std_dev` have `x`'s shape with the normalised
    dimensions set to 1 and the element type named by `stash_type` (1: f32,
    10: f16, 11: f64, 16: bf16); they always exist, even when the ONNX node
    does not use them.

    Example:
    ```mlir
    %y, %mean, %rstd = moe.layer_normalization %x, %gamma, %beta
        {epsilon = 9.99999974E-6 : f32}
        : (tensor<?x64xf32>, tensor<64xf32>, tensor<64xf32>)
        -> (tensor<?x64xf32>, tensor<?x1xf32>, tensor<?x1xf32>)
    ```
  }];
  let arguments = (ins Moe_FloatTensor:$x, Moe_FloatTensor:$scale,
                       Optional<Moe_FloatTensor>:$bias,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<Moe_NonNegativeF32Attr, "1.0e-5">:$epsilon,
                       DefaultValuedAttr<I64Attr, "1">:$stash_type);
  let results = (outs Moe_FloatTensor:$output, Moe_FloatTensor:$mean,
                      Moe_FloatTensor:$inv_std_dev);
}

def Moe_SimplifiedLayerNormalizationOp
    : Moe_GraphOp<"simplified_layer_normalization",
                  [Moe_SameShapeAsFirst, Moe_InPlaceable]> {
  let summary = "RMS normalisation (onnxruntime SimplifiedLayerNormalization)";
  let description = [{
    Divides `x` by the root mean square over the dimensions from `axis` to the
    last (`epsilon` added to the mean square) and multiplies by `scale`: the
    RMSNorm of LLaMA-style models. `inv_std_var` has `x`'s shape with the
    normalised dimensions set to 1 and the element type named by `stash_type`;
    it always exists, even when the node does not use it.

    Example:
    ```mlir
    %y, %r = moe.simplified_layer_normalization %x, %gamma
        {epsilon = 9.99999997E-7 : f32}
        : (tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x1xf32>)
    ```
  }];
  let arguments = (ins Moe_FloatTensor:$x, Moe_FloatTensor:$scale,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<Moe_NonNegativeF32Attr, "1.0e-5">:$epsilon,
                       DefaultValuedAttr<I64Attr, "1">:$stash_type);
  let results = (outs Moe_FloatTensor:$output, Moe_FloatTensor:$inv_std_var);
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

def Moe_MatMulOp : Moe_GraphOp<"mat_mul"> {
  let summary = "Numpy matrix product (ONNX MatMul, opset 13)";
  let description = [{
    Matrix product with numpy semantics: 1-D operands are promoted to
    matrices (and the added dimension dropped from the result), and leading
    batch dimensions broadcast.

    Example:
    ```mlir
    %y = moe.mat_mul %x, %w : (tensor<?x64xf32>, tensor<64x128xf32>) -> tensor<?x128xf32>
    %b = moe.mat_mul %h, %w3 : (tensor<8x?x64xf32>, tensor<8x64x32xf32>) -> tensor<8x?x32xf32>
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$a, Moe_NumericTensor:$b);
  let results = (outs Moe_NumericTensor:$output);
}

def Moe_GemmOp : Moe_GraphOp<"gemm"> {
  let summary = "General matrix multiply (ONNX Gemm, opset 13)";
  let description = [{
    Computes `alpha * op(a) * op(b) + beta * c` for 2-D `a` and `b`, where
    `op` transposes when `transA`/`transB` is 1; the optional `c` broadcasts
    to the `[M, N]` result.

    Example:
    ```mlir
    %y = moe.gemm %x, %w, %bias {transB = 1 : i64}
        : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$a, Moe_NumericTensor:$b,
                       Optional<Moe_NumericTensor>:$c,
                       DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                       DefaultValuedAttr<F32Attr, "1.0">:$beta,
                       DefaultValuedAttr<I64Attr, "0">:$transA,
                       DefaultValuedAttr<I64Attr, "0">:$transB);
  let results = (outs Moe_NumericTensor:$output);
}

def Moe_EinsumOp : Moe_GraphOp<"einsum"> {
  let summary = "Einstein summation (ONNX Einsum, opset 12)";
  let description = [{
    Contracts `inputs` as the `equation` says: one comma-separated term of
    lower- or upper-case letters per operand, optionally `...` for broadcast
    dimensions, and an optional `->` with the output's letters (without it,
    the letters used exactly once, in alphabetical order).

    Example:
    ```mlir
    %y = moe.einsum %h, %w {equation = "etd,edf->etf"}
        : (tensor<8x?x64xf32>, tensor<8x64x32xf32>) -> tensor<8x?x32xf32>
    ```
  }];
  let arguments = (ins Variadic<Moe_NumericTensor>:$inputs, StrAttr:$equation);
  let results = (outs Moe_NumericTensor:$output);
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def Moe_ReshapeOp : Moe_GraphOp<"reshape", [Moe_InPlaceable, Moe_View]> {
  let summary = "Gives a tensor a new shape (ONNX Reshape, opset 21)";
  let description = [{
    Reinterprets `data` with the shape in the 1-D i64 `shape` operand. An
    entry of 0 copies the input's dimension at that position (unless
    `allowzero` is 1, when it means a zero-size dimension), and one entry may
    be -1, inferred from the element count. Inference looks through shape
    vectors assembled from constants and `moe.dim`s, so a torch-style
    `Reshape(x, Concat(dim(x, 0), [16]))` gives `tensor<?x16xf32>`.

    Example:
    ```mlir
    %y = moe.reshape %x, %shape : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Moe_I64Tensor:$shape,
                       DefaultValuedAttr<I64Attr, "0">:$allowzero);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Moe_FlattenOp : Moe_GraphOp<"flatten", [Moe_InPlaceable, Moe_View]> {
  let summary = "Flattens a tensor into a matrix (ONNX Flatten, opset 21)";
  let description = [{
    Reshapes `input` to 2-D: dimensions before `axis` form the first, the
    rest the second (negative `axis` counts from the back).

    Example:
    ```mlir
    %y = moe.flatten %x {axis = 1 : i64} : (tensor<?x4x16xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, DefaultValuedAttr<I64Attr, "1">:$axis);
  let results = (outs Moe_Tensor:$output);
}

def Moe_TransposeOp : Moe_GraphOp<"transpose"> {
  let summary = "Permutes dimensions (ONNX Transpose, opset 21)";
  let description = [{
    Result dimension `i` is input dimension `perm[i]`; without `perm` the
    dimensions are reversed.

    Example:
    ```mlir
    %y = moe.transpose %x {perm = array<i64: 2, 0, 1>}
        : (tensor<?x8x2xi64>) -> tensor<2x?x8xi64>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, OptionalAttr<DenseI64ArrayAttr>:$perm);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
  let extraClassDeclaration = [{
    /// `perm`, or the reversal of the dimensions when it is absent.
    ::llvm::SmallVector<int64_t> getPermutation();
  }];
}

def Moe_SqueezeOp : Moe_GraphOp<"squeeze", [Moe_InPlaceable, Moe_View]> {
  let summary = "Removes size-1 dimensions (ONNX Squeeze, opset 21)";
  let description = [{
    Removes the dimensions listed in the optional 1-D i64 `axes` operand
    (each must have size 1), or every size-1 dimension when it is absent; a
    dynamic dimension then counts as not 1, so the result rank is static (a
    token count that happens to be 1 is not squeezed away).

    Example:
    ```mlir
    %y = moe.squeeze %x, %axes : (tensor<?x1x16xf32>, tensor<1xi64>) -> tensor<?x16xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Optional<Moe_I64Tensor>:$axes);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
}

def Moe_UnsqueezeOp : Moe_GraphOp<"unsqueeze", [Moe_InPlaceable, Moe_View]> {
  let summary = "Inserts size-1 dimensions (ONNX Unsqueeze, opset 21)";
  let description = [{
    Inserts a size-1 dimension at each position of the 1-D i64 `axes` operand,
    positions referring to the result (negative counts from its back).

    Example:
    ```mlir
    %v = moe.unsqueeze %d, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Moe_I64Tensor:$axes);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
}

def Moe_ConcatOp : Moe_GraphOp<"concat"> {
  let summary = "Joins tensors along an axis (ONNX Concat, opset 13)";
  let description = [{
    Concatenates one or more `inputs` of equal rank and element type along
    `axis`; the other dimensions must agree. Shape vectors assembled from
    constants and `moe.dim`s stay in this form after canonicalisation.

    Example:
    ```mlir
    %s = moe.concat %t, %c16 {axis = 0 : i64}
        : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
    ```
  }];
  let arguments = (ins Variadic<Moe_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Moe_StackOp : Moe_GraphOp<"stack"> {
  let summary = "Stacks same-typed tensors along a new leading dimension";
  let description = [{
    Joins N `inputs` of one type `tensor<d0 x ... x T>` into one
    `tensor<N x d0 x ... x T>` whose slice `i` along the new leading
    dimension is input `i`. Not an ONNX operator: the MoE detectors build it
    to present per-expert weights as one stacked tensor without copying them.

    A stack whose inputs are all `moe.constant`s is a weight: it never folds
    into a new constant (the compiler would copy the model's weights) and the
    plan writes it as one weight whose bytes are the inputs' bytes in order.
    Any other stack canonicalises to `moe.concat` of the inputs unsqueezed at
    axis 0.

    Example:
    ```mlir
    %w = moe.stack %w0, %w1, %w2, %w3
        : (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>,
           tensor<16x32xf32>) -> tensor<4x16x32xf32>
    ```
  }];
  let arguments = (ins Variadic<Moe_Tensor>:$inputs);
  let results = (outs Moe_Tensor:$output);
  let hasCanonicalizer = 1;
  let extraClassDeclaration = [{
    /// Whether every input is a `moe.constant`: the stack is then a weight
    /// the plan stores, not a step the runtime runs.
    bool isWeight();
  }];
}

def Moe_SplitOp : Moe_GraphOp<"split"> {
  let summary = "Splits a tensor into parts along an axis (ONNX Split, opset 18)";
  let description = [{
    Splits `input` along `axis` into one result per ONNX output: sizes come
    from the optional 1-D i64 `split` operand, otherwise `num_outputs` equal
    parts (the last one smaller when the size does not divide). One of the two
    is required to know the number of results.

    Example:
    ```mlir
    %g, %u = moe.split %h {axis = -1 : i64, num_outputs = 2 : i64}
        : (tensor<?x128xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, Optional<Moe_I64Tensor>:$split,
                       DefaultValuedAttr<I64Attr, "0">:$axis,
                       OptionalAttr<I64Attr>:$num_outputs);
  let results = (outs Variadic<Moe_Tensor>:$outputs);
}

def Moe_SliceOp : Moe_GraphOp<"slice", [AttrSizedOperandSegments]> {
  let summary = "Takes a strided slice (ONNX Slice, opset 13)";
  let description = [{
    Slices `data` along the dimensions in `axes` (default: the first
    `len(starts)` ones) from `starts` to `ends` (exclusive) by `steps`
    (default 1), all 1-D i32/i64 operands of one length. Negative starts/ends
    count from the back; out-of-range values are clamped, as in ONNX.

    Example:
    ```mlir
    %s = moe.slice %x, %starts, %ends axes %axes
        : (tensor<?x128xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>)
        -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Moe_IndexTensor:$starts,
                       Moe_IndexTensor:$ends, Optional<Moe_IndexTensor>:$axes,
                       Optional<Moe_IndexTensor>:$steps);
  let results = (outs Moe_Tensor:$output);
  let assemblyFormat = [{
    $data `,` $starts `,` $ends (`axes` $axes^)? (`steps` $steps^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasFolder = 1;
}

def Moe_ExpandOp : Moe_GraphOp<"expand"> {
  let summary = "Broadcasts a tensor to a shape (ONNX Expand, opset 13)";
  let description = [{
    Broadcasts `input` together with the 1-D i64 `shape` (numpy rules, so the
    result may have more dimensions than `shape` asks, and a 1 in `shape`
    keeps the input's size).

    Example:
    ```mlir
    %y = moe.expand %x, %shape : (tensor<1x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, Moe_I64Tensor:$shape);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
}

def Moe_TileOp : Moe_GraphOp<"tile"> {
  let summary = "Repeats a tensor along each dimension (ONNX Tile, opset 13)";
  let description = [{
    Repeats `input` `repeats[i]` times along dimension `i`; `repeats` is a 1-D
    i64 tensor with one entry per input dimension.

    Example:
    ```mlir
    %y = moe.tile %x, %reps : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<?x32xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, Moe_I64Tensor:$repeats);
  let results = (outs Moe_Tensor:$output);
}

def Moe_TriluOp : Moe_GraphOp<"trilu", [Moe_SameShapeAsFirst, Moe_InPlaceable],
    Moe_InferWith<"::moec::moe::inferSameAsFirst">.body> {
  let summary = "Upper or lower triangle of matrices (ONNX Trilu, opset 14)";
  let description = [{
    Keeps the upper (`upper = 1`) or lower triangle of the last two dimensions
    of `input` relative to diagonal `k` (an optional scalar i64, default 0) and
    zeroes the rest.

    Example:
    ```mlir
    %m = moe.trilu %x, %k {upper = 0 : i64}
        : (tensor<?x?xf32>, tensor<i64>) -> tensor<?x?xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, Optional<Moe_I64Tensor>:$k,
                       DefaultValuedAttr<I64Attr, "1">:$upper);
  let results = (outs Moe_Tensor:$output);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

def Moe_GatherOp : Moe_GraphOp<"gather"> {
  let summary = "Gathers slices along an axis (ONNX Gather, opset 13)";
  let description = [{
    Indexes `data` along `axis` with every element of `indices` (negative
    indices count from the back); the result shape is `data.shape[:axis] +
    indices.shape + data.shape[axis+1:]`. `Gather(Shape(x), i)` canonicalises
    to `moe.dim`.

    Example:
    ```mlir
    %rows = moe.gather %x, %idx {axis = 0 : i64}
        : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Moe_IndexTensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs Moe_Tensor:$output);
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Moe_GatherElementsOp : Moe_GraphOp<"gather_elements"> {
  let summary = "Gathers elements along an axis (ONNX GatherElements, opset 13)";
  let description = [{
    `output[i][j]... = data[..., indices[i][j]..., ...]` with the index used
    at position `axis`; `indices` has `data`'s rank and the result has
    `indices`' shape.

    Example:
    ```mlir
    %w = moe.gather_elements %probs, %idx {axis = 1 : i64}
        : (tensor<?x8xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Moe_IndexTensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs Moe_Tensor:$output);
}

def Moe_GatherNDOp : Moe_GraphOp<"gather_nd"> {
  let summary = "Gathers slices by index tuples (ONNX GatherND, opset 13)";
  let description = [{
    Each innermost vector of `indices` (length `q_last`) indexes the leading
    dimensions of `data` after the first `batch_dims` shared batch
    dimensions; the result shape is `indices.shape[:-1] +
    data.shape[batch_dims + q_last:]`.

    Example:
    ```mlir
    %y = moe.gather_nd %x, %idx : (tensor<4x8x16xf32>, tensor<?x2xi64>) -> tensor<?x16xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Moe_I64Tensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$batch_dims);
  let results = (outs Moe_Tensor:$output);
}

def Moe_ScatterElementsOp : Moe_GraphOp<"scatter_elements",
    [Moe_SameShapeAsFirst, Moe_InPlaceable],
    Moe_InferWith<"::moec::moe::inferSameAsFirst">.body> {
  let summary = "Scatters elements along an axis (ONNX ScatterElements, opset 18)";
  let description = [{
    A copy of `data` where, for every position of `indices`, the element at
    that index along `axis` is replaced by (`reduction = "none"`) or combined
    with (`add`, `mul`, `max`, `min`) the matching element of `updates`.
    `indices` and `updates` have one shape and `data`'s rank. torch's
    `index_add` exports to the `add` form.

    Example:
    ```mlir
    %y = moe.scatter_elements %acc, %idx, %upd {axis = 0 : i64, reduction = "add"}
        : (tensor<?x64xf32>, tensor<?x64xi64>, tensor<?x64xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Moe_IndexTensor:$indices,
                       Moe_Tensor:$updates,
                       DefaultValuedAttr<I64Attr, "0">:$axis,
                       DefaultValuedStrAttr<StrAttr, "none">:$reduction);
  let results = (outs Moe_Tensor:$output);
  let hasVerifier = 1;
}

def Moe_ScatterNDOp : Moe_GraphOp<"scatter_nd",
    [Moe_SameShapeAsFirst, Moe_InPlaceable],
    Moe_InferWith<"::moec::moe::inferSameAsFirst">.body> {
  let summary = "Scatters slices by index tuples (ONNX ScatterND, opset 18)";
  let description = [{
    A copy of `data` where the slice addressed by each innermost vector of
    `indices` is replaced by (`reduction = "none"`) or combined with (`add`,
    `mul`, `max`, `min`) the matching slice of `updates`, whose shape is
    `indices.shape[:-1] + data.shape[indices.shape[-1]:]`.

    Example:
    ```mlir
    %y = moe.scatter_nd %x, %idx, %upd
        : (tensor<8x16xf32>, tensor<?x1xi64>, tensor<?x16xf32>) -> tensor<8x16xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$data, Moe_I64Tensor:$indices,
                       Moe_Tensor:$updates,
                       DefaultValuedStrAttr<StrAttr, "none">:$reduction);
  let results = (outs Moe_Tensor:$output);
  let hasVerifier = 1;
}

def Moe_OneHotOp : Moe_GraphOp<"one_hot"> {
  let summary = "One-hot encoding (ONNX OneHot, opset 11)";
  let description = [{
    Inserts a dimension of size `depth` (a scalar or 1-element tensor) at
    `axis` of `indices`' shape; the element at each index is `values[1]`
    (on) and every other is `values[0]` (off). Negative indices count from
    `depth`. The result has `values`' element type.

    Example:
    ```mlir
    %m = moe.one_hot %idx, %depth, %values {axis = -1 : i64}
        : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x8xi64>
    ```
  }];
  let arguments = (ins Moe_NumericTensor:$indices, Moe_NumericTensor:$depth,
                       Moe_Tensor:$values,
                       DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs Moe_Tensor:$output);  let hasFolder = 1;
}

def Moe_NonZeroOp : Moe_GraphOp<"non_zero"> {
  let summary = "Indices of non-zero elements (ONNX NonZero, opset 13)";
  let description = [{
    Returns a `[rank, N]` i64 tensor whose columns are the coordinates of the
    `N` non-zero elements of `x` in row-major order. `N` is data-dependent and
    bounded by the element count of `x`.

    Example:
    ```mlir
    %nz = moe.non_zero %mask : (tensor<?xi1>) -> tensor<1x?xi64>
    ```
  }];
  let arguments = (ins Moe_Tensor:$x);
  let results = (outs Moe_I64Tensor:$output);
}

#endif // MOE_GRAPH_OPS_TD
