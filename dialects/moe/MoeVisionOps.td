//===- MoeVisionOps.td - vision encoder graph ops ----------*- tablegen -*-===//
//
// The ops of vision encoders (patch embeddings, convolutional layers), under
// MoeGraphOps.td's contract with the ONNX importer. They are generated apart
// from MoeOps.td (MoeVisionOps.h.inc, declared by MoeVisionOps.h and
// registered with the dialect), so that only the code that handles them
// includes them.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_VISION_OPS_TD
#define MOE_VISION_OPS_TD

// MoeGraphOps.td's contract and base classes without its op families, which
// MoeOps.td generates.
#define MOE_ELEMENTWISE_OPS_TD
#define MOE_NN_OPS_TD
#define MOE_SHAPE_OPS_TD
include "dialects/moe/MoeGraphOps.td"

def Moe_ConvOp : Moe_GraphOp<"conv", [Moe_PlanStepWithAttrs<"Conv">]> {
  let summary = "Convolution (ONNX Conv, opset 11)";
  let description = [{
    Convolves `x` `[N, C, D1, ..., Dk]` with the filters `w`
    `[M, C / group, K1, ..., Kk]` over the k >= 1 spatial axes and adds the
    optional `bias` `[M]`: `y[n, m, o]` sums `x[n, c, o * stride - pad_begin
    + kk * dilation] * w[m, c', kk]` over the channels `c` of filter `m`'s
    group and the kernel positions `kk`, zeros outside `x`. Each output size
    is `floor((D + pad_begin + pad_end - dilation * (K - 1) - 1) / stride) +
    1`. `strides` and `dilations` default to 1 per axis, `pads` (the begin
    pads then the end pads) to 0; `auto_pad` `VALID` pads nothing, and
    `SAME_UPPER`/`SAME_LOWER` pad so that each output size is
    `ceil(D / stride)`, the odd pad at the end or the beginning. A
    `kernel_shape` must equal `w`'s spatial sizes.

    Example (a Qwen-VL patch embedding):
    ```mlir
    %y = moe.conv %x, %w {kernel_shape = array<i64: 2, 16, 16>,
                          strides = array<i64: 2, 16, 16>}
        : (tensor<?x3x2x16x16xf32>, tensor<1152x3x2x16x16xf32>)
        -> tensor<?x1152x1x1x1xf32>
    ```
  }];
  let arguments = (ins Moe_FloatTensor:$x, Moe_FloatTensor:$w,
                       Optional<Moe_FloatTensor>:$bias,
                       DefaultValuedStrAttr<StrAttr, "NOTSET">:$auto_pad,
                       OptionalAttr<DenseI64ArrayAttr>:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$group,
                       OptionalAttr<DenseI64ArrayAttr>:$kernel_shape,
                       OptionalAttr<DenseI64ArrayAttr>:$pads,
                       OptionalAttr<DenseI64ArrayAttr>:$strides);
  let results = (outs Moe_FloatTensor:$y);
}

def Moe_GridSampleOp
    : Moe_GraphOp<"grid_sample", [Moe_PlanStepWithAttrs<"GridSample">]> {
  let summary = "Sampling of images at grid points (ONNX GridSample, 16)";
  let description = [{
    Samples each image `x` `[N, C, H, W]` at the points of `grid`
    `[N, Ho, Wo, 2]`, (x, y) pairs in [-1, 1] across the image's width and
    height: `y` is `[N, C, Ho, Wo]`. With `align_corners` 1, -1 and 1 are
    the centres of the corner pixels, with 0 their outer edges. `mode` is
    `linear` (bilinear), `nearest` (rounding half to even) or `cubic`
    (bicubic, A = -0.75); opset 16's names `bilinear` and `bicubic` are
    accepted for them. `padding_mode` says what is read outside the image:
    `zeros`, `border` (the nearest border pixel) or `reflection`. Only 4-D
    inputs are supported (GridSample 20's N-D form is refused).

    Example (GLM-4.5V's position-embedding table at each patch):
    ```mlir
    %y = moe.grid_sample %table, %grid {mode = "bicubic",
                                        padding_mode = "border"}
        : (tensor<1x1536x24x24xf32>, tensor<1x?x1x2xf32>)
        -> tensor<1x1536x?x1xf32>
    ```
  }];
  let arguments = (ins Moe_FloatTensor:$x, Moe_FloatTensor:$grid,
                       DefaultValuedAttr<I64Attr, "0">:$align_corners,
                       DefaultValuedStrAttr<StrAttr, "linear">:$mode,
                       DefaultValuedStrAttr<StrAttr, "zeros">:$padding_mode);
  let results = (outs Moe_FloatTensor:$y);
}

#endif // MOE_VISION_OPS_TD
