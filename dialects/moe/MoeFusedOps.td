//===- MoeFusedOps.td - fused regions ----------------------*- tablegen -*-===//
//
// Ops that group graph ops so that they execute as one step.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FUSED_OPS_TD
#define MOE_FUSED_OPS_TD

include "dialects/moe/MoeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Moe_FusedElementwiseOp : Moe_Op<"fused_elementwise",
    [IsolatedFromAbove, Pure, SingleBlock]> {
  let summary = "A chain of elementwise ops executed as one step";
  let description = [{
    Groups float32 elementwise graph ops so that the runtime computes them in
    one pass over the data instead of one pass (and one intermediate buffer)
    per op. The body's block arguments are the operands; the body holds the
    original graph ops and `moe.yield`s the values used outside the group.
    Operands broadcast (numpy rules) to one iteration shape, which every
    result has. Produced by `moe-fuse-elementwise`.

    Example:
    ```mlir
    %y = moe.fused_elementwise ins(%x, %b : tensor<?x16xf32>, tensor<16xf32>)
        -> tensor<?x16xf32> {
    ^bb0(%a: tensor<?x16xf32>, %c: tensor<16xf32>):
      %0 = moe.add %a, %c : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
      %1 = moe.sigmoid %0 : (tensor<?x16xf32>) -> tensor<?x16xf32>
      moe.yield %1 : tensor<?x16xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<Moe_Tensor>:$inputs);
  let results = (outs Variadic<Moe_Tensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `ins` `(` $inputs `:` type($inputs) `)` (`->` type($outputs)^)? $body
    attr-dict
  }];
  let hasVerifier = 1;
}

def Moe_YieldOp : Moe_Op<"yield",
    [Pure, Terminator, HasParent<"FusedElementwiseOp">]> {
  let summary = "Returns the values of a fused region";
  let description = [{
    Terminates the body of `moe.fused_elementwise`; its operands become the
    fused op's results, in order.

    Example:
    ```mlir
    moe.yield %1, %2 : tensor<?x16xf32>, tensor<?x16xf32>
    ```
  }];
  let arguments = (ins Variadic<Moe_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // MOE_FUSED_OPS_TD
