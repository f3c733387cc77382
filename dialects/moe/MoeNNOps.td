//===- MoeNNOps.td - normalisation, reduction, contraction -*- tablegen -*-===//
//
// The ONNX operators that reduce or contract along axes: softmax,
// reductions, ArgMax, CumSum, TopK, the layer normalisations, MatMul, Gemm
// and Einsum. They follow the importer contract of MoeGraphOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_NN_OPS_TD
#define MOE_NN_OPS_TD

include "dialects/moe/MoeGraphOps.td"

/// A reduction with an optional `axes` operand (ReduceSum opset 13, the others
/// opset 18) over tensors of `type`; the plan step named `onnxName`.
class Moe_ReduceOp<string mnemonic, string onnxName, string what,
                   Type type = Moe_NumericTensor>
    : Moe_GraphOp<mnemonic, [Moe_PlanStepWithAttrs<onnxName>], [{
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
    ::llvm::LogicalResult
    $cppClass::getPlanStepAttrs(::moert::fb::AttrsUnion &attrs) {
      return ::moec::moe::setReduceStepAttrs(attrs, getKeepdims() != 0,
                                             getNoopWithEmptyAxes() != 0);
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

/// Softmax-like ops normalising along one axis; the plan step named
/// `onnxName`.
class Moe_SoftmaxOp<string mnemonic, string onnxName, string what>
    : Moe_GraphOp<mnemonic, [Moe_PlanStepWithAttrs<onnxName>,
                             Moe_SameShapeAsFirst, Moe_InPlaceable],
                  Moe_InferWith<"::moec::moe::inferSameAsFirst">.body # [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::moec::moe::verifyAxis(getOperation(), "axis", getAxis(),
                                     getInput().getType().getRank());
    }
    ::llvm::LogicalResult
    $cppClass::getPlanStepAttrs(::moert::fb::AttrsUnion &attrs) {
      return ::moec::moe::setAxisStepAttrs(attrs, getAxisAttr().getInt());
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

def Moe_ArgMaxOp : Moe_GraphOp<"arg_max", [Moe_PlanStepWithAttrs<"ArgMax">]> {
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

def Moe_CumSumOp : Moe_GraphOp<"cum_sum", [Moe_PlanStepWithAttrs<"CumSum">,
    Moe_SameShapeAsFirst],
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

def Moe_TopKOp : Moe_GraphOp<"top_k", [Moe_PlanStepWithAttrs<"TopK">]> {
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
    [Moe_PlanStepWithAttrs<"LayerNormalization">,
    Moe_SameShapeAsFirst, Moe_InPlaceable]> {
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
                  [Moe_PlanStepWithAttrs<"SimplifiedLayerNormalization">,
    Moe_SameShapeAsFirst, Moe_InPlaceable]> {
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

def Moe_MatMulOp : Moe_GraphOp<"mat_mul", [Moe_PlanStep<"MatMul">]> {
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

def Moe_GemmOp : Moe_GraphOp<"gemm", [Moe_PlanStepWithAttrs<"Gemm">]> {
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

def Moe_EinsumOp : Moe_GraphOp<"einsum", [Moe_PlanStepWithAttrs<"Einsum">]> {
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

#endif // MOE_NN_OPS_TD
