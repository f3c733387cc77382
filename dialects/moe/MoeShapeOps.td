//===- MoeShapeOps.td - shape and indexing graph ops -------*- tablegen -*-===//
//
// The ONNX operators that make constants and shape values, move data
// between shapes and index into tensors. They follow the importer contract
// of MoeGraphOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_SHAPE_OPS_TD
#define MOE_SHAPE_OPS_TD

include "dialects/moe/MoeGraphOps.td"

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

def Moe_DimOp : Moe_GraphOp<"dim", [Moe_PlanStepWithAttrs<"Dim">]> {
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

def Moe_ShapeOp : Moe_GraphOp<"shape", [Moe_PlanStepWithAttrs<"Shape">]> {
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

def Moe_SizeOp : Moe_GraphOp<"size", [Moe_PlanStep<"Size">]> {
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

def Moe_ConstantOfShapeOp : Moe_GraphOp<"constant_of_shape",
    [Moe_PlanStepWithAttrs<"ConstantOfShape">]> {
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

def Moe_RangeOp : Moe_GraphOp<"range", [Moe_PlanStep<"Range">]> {
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
    [Moe_PlanStep<"Identity">,
    Moe_Elementwise, Moe_SameShapeAsFirst, Moe_InPlaceable, Moe_View],
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
// Shape manipulation
//===----------------------------------------------------------------------===//

def Moe_ReshapeOp : Moe_GraphOp<"reshape", [Moe_PlanStepWithAttrs<"Reshape">,
    Moe_InPlaceable, Moe_View]> {
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

def Moe_FlattenOp : Moe_GraphOp<"flatten", [Moe_PlanStepWithAttrs<"Flatten">,
    Moe_InPlaceable, Moe_View]> {
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

def Moe_TransposeOp : Moe_GraphOp<"transpose",
    [Moe_PlanStepWithAttrs<"Transpose">]> {
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

def Moe_SqueezeOp : Moe_GraphOp<"squeeze", [Moe_PlanStep<"Squeeze">,
    Moe_InPlaceable, Moe_View]> {
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

def Moe_UnsqueezeOp : Moe_GraphOp<"unsqueeze", [Moe_PlanStep<"Unsqueeze">,
    Moe_InPlaceable, Moe_View]> {
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

def Moe_ConcatOp : Moe_GraphOp<"concat", [Moe_PlanStepWithAttrs<"Concat">]> {
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

def Moe_SplitOp : Moe_GraphOp<"split", [Moe_PlanStepWithAttrs<"Split">]> {
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

def Moe_SliceOp : Moe_GraphOp<"slice", [Moe_PlanStep<"Slice">,
    AttrSizedOperandSegments]> {
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

def Moe_ExpandOp : Moe_GraphOp<"expand", [Moe_PlanStep<"Expand">]> {
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

def Moe_TileOp : Moe_GraphOp<"tile", [Moe_PlanStep<"Tile">]> {
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

def Moe_TriluOp : Moe_GraphOp<"trilu", [Moe_PlanStepWithAttrs<"Trilu">,
    Moe_SameShapeAsFirst, Moe_InPlaceable],
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

def Moe_GatherOp : Moe_GraphOp<"gather", [Moe_PlanStepWithAttrs<"Gather">]> {
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

def Moe_GatherElementsOp : Moe_GraphOp<"gather_elements",
    [Moe_PlanStepWithAttrs<"GatherElements">]> {
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

def Moe_GatherNDOp : Moe_GraphOp<"gather_nd",
    [Moe_PlanStepWithAttrs<"GatherND">]> {
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
    [Moe_PlanStepWithAttrs<"ScatterElements">,
    Moe_SameShapeAsFirst, Moe_InPlaceable],
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
    [Moe_PlanStepWithAttrs<"ScatterND">, Moe_SameShapeAsFirst, Moe_InPlaceable],
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

def Moe_OneHotOp : Moe_GraphOp<"one_hot", [Moe_PlanStepWithAttrs<"OneHot">]> {
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

def Moe_NonZeroOp : Moe_GraphOp<"non_zero", [Moe_PlanStep<"NonZero">]> {
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

#endif // MOE_SHAPE_OPS_TD
