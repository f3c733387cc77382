//===- MoeQuantOps.td - Block-quantized constant weights ---*- tablegen -*-===//
//
// Weights that onnxruntime's int4/int8 contrib ops (MatMulNBits, QMoE) store
// block-quantized, kept packed from the model to the plan.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_QUANT_OPS_TD
#define MOE_QUANT_OPS_TD

include "dialects/moe/MoeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Moe_BlockQuantizedConstantOp : Moe_Op<"block_quantized_constant", [Pure]> {
  let summary = "A constant f32 weight stored as block-quantized int4/int8";
  let description = [{
    An f32 constant whose value is given by its block-quantized storage, as
    onnxruntime's MatMulNBits and QMoE define it. The stored matrices are
    `[outer..., rows, cols]`: each row split into blocks of `block_size`
    columns (the last one may be shorter) sharing a scale and a zero point,

    ```
    stored[..., r, c] = (code(r, c) - zero(r, c / block_size))
                        * scale(r, c / block_size)
    ```

    computed in f32 (the integer difference is exact; the product is the one
    rounding). `codes` holds `[outer..., rows, blocks * block_size * bits /
    8]` bytes (unsigned codes packed low bits first), `scales` `[outer...,
    rows, blocks]` f32 or f16 (widened exactly), `zero_points` (optional;
    absent: 2^(bits - 1))
    `[outer..., rows, ceil(blocks * bits / 8)]` bytes packed like the codes;
    each attribute holds that many elements in row-major order, whatever its
    own shape. The result is the stored tensor, or with `transposed` (rank 2
    only) its transpose: MatMulNBits' `[N, K]` weight as the `[K, N]` right
    operand of `moe.mat_mul`.

    The plan keeps the codes packed where a step reads them as they are
    (`moe.mat_mul`'s right operand, `moe.experts`' matrices); anywhere else
    the emitter stores the exact f32 values. `int8_activations` (the
    model's `accuracy_level` 4) lets those steps quantize their activations
    to int8 per block and multiply integers, as onnxruntime does; where the
    f32 values are stored, products compute in f32. It is no `ConstantLike`: folders
    that need values leave it alone.

    Example:
    ```mlir
    %w = moe.block_quantized_constant bits 4 block_size 32 transposed
           codes dense_resource<b> : tensor<64x32xui8>
           scales dense_resource<s> : tensor<64x2xf32> : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntMinValue<1>]>:$bits,
                       ConfinedAttr<I64Attr, [IntMinValue<1>]>:$block_size,
                       UnitAttr:$transposed, ElementsAttr:$codes,
                       ElementsAttr:$scales,
                       OptionalAttr<ElementsAttr>:$zero_points,
                       UnitAttr:$int8_activations);
  let results = (outs RankedTensorOf<[F32]>:$output);
  let assemblyFormat = [{
    `bits` $bits `block_size` $block_size (`transposed` $transposed^)?
    `codes` $codes `scales` $scales (`zero_points` $zero_points^)?
    (`int8_activations` $int8_activations^)? attr-dict
    `:` type($output)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The shape of the stored matrices: the result's, or its transpose.
    ::llvm::SmallVector<int64_t> getStoredShape();
    /// The number of stored matrices (the product of the outer dims).
    int64_t getNumMatrices();
    /// Rows and columns of each stored matrix.
    int64_t getRows();
    int64_t getCols();
    /// Blocks per row: ceil(cols / block_size).
    int64_t getNumBlocks();
    /// Bytes of the codes of one row, and of its zero points.
    int64_t getRowBytes();
    int64_t getZeroPointRowBytes();
    /// Writes the f32 value of the result (its elements in row-major order,
    /// transposed when `transposed`) into `out`; fails when an attribute's
    /// data cannot be read.
    ::mlir::LogicalResult dequantize(float *out);
  }];
}

#endif // MOE_QUANT_OPS_TD
