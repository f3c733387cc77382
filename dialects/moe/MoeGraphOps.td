//===- MoeGraphOps.td - ONNX-semantics graph ops -----------*- tablegen -*-===//
//
// One op per supported ONNX operator, named after it in snake_case. Operands
// follow the newest supported opset's input order (older opsets are upgraded by
// the importer); attributes keep their ONNX names and map INT -> I64Attr,
// FLOAT -> F32Attr, INTS -> DenseI64ArrayAttr, FLOATS -> DenseF32ArrayAttr,
// STRING -> StrAttr, TENSOR -> ElementsAttr. Result types are inferred.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_GRAPH_OPS_TD
#define MOE_GRAPH_OPS_TD

include "dialects/moe/MoeBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

/// A side-effect-free graph op whose result types follow from its operands.
class Moe_GraphOp<string mnemonic, list<Trait> traits = []>
    : Moe_Op<mnemonic, !listconcat(traits,
        [Pure, DeclareOpInterfaceMethods<InferTypeOpInterface>])>;

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
  let summary = "One dimension of a tensor's shape as a 1-element i64 tensor";
  let description = [{
    The symbolic form of `Gather(Shape(x), index)`: the size of dimension
    `index` of `input`, as a `tensor<1xi64>`. Canonicalisation produces it for
    dynamic dimensions (the token count) and folds it to a constant for static
    ones.

    Example:
    ```mlir
    %t = moe.dim %x, 0 : tensor<?x16xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$input, I64Attr:$index);
  let results = (outs Moe_I64Tensor:$output);
  let assemblyFormat = "$input `,` $index attr-dict `:` type($input)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

#endif // MOE_GRAPH_OPS_TD
