//===- MoeGraphOps.td - ONNX-semantics graph ops -----------*- tablegen -*-===//
//
// One op per supported ONNX operator, defined by family in
// MoeElementwiseOps.td, MoeNNOps.td and MoeShapeOps.td; this file holds what
// they share. The contract with the ONNX importer, which builds these ops
// generically from a NodeProto:
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

// The ops, by family.
include "dialects/moe/MoeElementwiseOps.td"
include "dialects/moe/MoeNNOps.td"
include "dialects/moe/MoeShapeOps.td"

#endif // MOE_GRAPH_OPS_TD
