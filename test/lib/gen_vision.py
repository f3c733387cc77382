#!/usr/bin/env python3
"""Builds the vision-encoder ONNX models the lit tests import, by name.

    gen_vision.py NAME OUT.onnx     write model NAME to OUT.onnx
    gen_vision.py --list            list the model names

The valid models take their patches or images along a dynamic first axis,
so that test/lib/e2e.py feeds 1, 7, ... of them; weights are seeded random.
`qwen_vl_patch_block` is the start of a Qwen3-VL vision tower as
transformers 5.x's exporter writes it (pixel rows -> [N, 3, 2, P, P] -> Conv
with stride = kernel -> [N, hidden] -> LayerNorm -> MLP with tanh GELU), so
that CI checks the image path without torch or the exported zoo.
"""

import sys

import numpy as np

import gen_onnx
from gen_onnx import F32, const, make, node, value

MODELS = {}
RNG_SEED = 7


def model(name):
    def register(fn):
        MODELS[name] = fn
        return fn

    return register


def weights(shape, seed, scale=0.25):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def conv_model(x_shape, w_shape, y_channels, attrs, bias=True, opset=21):
    """x [batch, ...] -> Conv(x, w, b?) with `attrs` -> y, the batch dynamic."""
    inits = [const("w", weights(w_shape, 1))]
    inputs = ["x", "w"]
    if bias:
        inits.append(const("b", weights([w_shape[0]], 2)))
        inputs.append("b")
    rank = len(x_shape)
    return make([node("Conv", inputs, ["y"], name="conv", **attrs)],
                [value("x", F32, ["batch"] + list(x_shape[1:]))],
                [value("y", F32, ["batch", y_channels] + [None] * (rank - 2))], inits, opset=opset)


@model("conv3d_patch")
def _(out):
    """Qwen-VL's patch embedding: [N, 3, 2, 4, 4] by 8 filters of the same
    extent, stride = kernel, bias."""
    return conv_model([1, 3, 2, 4, 4], [8, 3, 2, 4, 4], 8,
                      dict(kernel_shape=[2, 4, 4], strides=[2, 4, 4], pads=[0] * 6, dilations=[1, 1, 1], group=1))


@model("conv2d_patch")
def _(out):
    """A ViT/Llama 4 patch embedding: a 12x8 image into 4x4 patches, no bias."""
    return conv_model([1, 3, 12, 8], [6, 3, 4, 4], 6, dict(kernel_shape=[4, 4], strides=[4, 4]), bias=False)


@model("conv2d_general")
def _(out):
    """Padding, strides, dilations and two groups at once."""
    return conv_model([1, 4, 9, 7], [6, 2, 3, 2], 6,
                      dict(strides=[2, 1], dilations=[1, 2], pads=[1, 0, 2, 1], group=2))


@model("conv1d_same_lower_depthwise")
def _(out):
    """Depthwise 1-D, auto_pad SAME_LOWER, stride 2 (opset 11's Conv)."""
    return conv_model([1, 4, 9], [4, 1, 4], 4, dict(auto_pad="SAME_LOWER", strides=[2], group=4), opset=11)


@model("conv3d_same_upper")
def _(out):
    """3-D, auto_pad SAME_UPPER, overlapping windows (opset 22's Conv)."""
    return conv_model([1, 2, 4, 5, 3], [3, 2, 2, 3, 2], 3, dict(auto_pad="SAME_UPPER", strides=[1, 2, 1]),
                      opset=22)


@model("qwen_vl_patch_block")
def _(out):
    """pixel rows [N, 3*2*4*4] -> patch embedding (Conv3d, hidden 16) ->
    LayerNorm -> Gemm -> Gelu(tanh) -> Gemm, plus the residual."""
    hidden, ffn = 16, 32
    nodes = [
        node("Reshape", ["pixels", "patch_shape"], ["patches"]),
        node("Conv", ["patches", "patch_w", "patch_b"], ["embedded"], name="patch_embed",
             kernel_shape=[2, 4, 4], strides=[2, 4, 4]),
        node("Reshape", ["embedded", "rows_shape"], ["h"]),
        node("LayerNormalization", ["h", "ln_w", "ln_b"], ["normed"], axis=-1, epsilon=1e-6),
        node("Gemm", ["normed", "fc1_w", "fc1_b"], ["up"], transB=1),
        node("Gelu", ["up"], ["act"], approximate="tanh"),
        node("Gemm", ["act", "fc2_w", "fc2_b"], ["down"], transB=1),
        node("Add", ["h", "down"], ["y"]),
    ]
    inits = [
        const("patch_shape", np.array([-1, 3, 2, 4, 4], np.int64)),
        const("rows_shape", np.array([-1, hidden], np.int64)),
        const("patch_w", weights([hidden, 3, 2, 4, 4], 11)),
        const("patch_b", weights([hidden], 12)),
        const("ln_w", 1 + weights([hidden], 13)),
        const("ln_b", weights([hidden], 14)),
        const("fc1_w", weights([ffn, hidden], 15)),
        const("fc1_b", weights([ffn], 16)),
        const("fc2_w", weights([hidden, ffn], 17)),
        const("fc2_b", weights([hidden], 18)),
    ]
    return make(nodes, [value("pixels", F32, ["patches", 96])], [value("y", F32, ["patches", hidden])], inits,
                opset=20)


def pad_model(pads, opset=20):
    """Llama 4's unfold: a Pad of constant `pads`, then the image cut into
    4x4 patches by Reshape and Transpose, and a MatMul."""
    nodes = [
        node("Pad", ["x", "pads"], ["padded"], name="pad", mode="constant"),
        node("Reshape", ["padded", "grid"], ["tiles"]),
        node("Transpose", ["tiles"], ["patches"], perm=[0, 2, 4, 1, 3, 5]),
        node("Reshape", ["patches", "rows"], ["flat"]),
        node("MatMul", ["flat", "w"], ["y"]),
    ]
    inits = [const("pads", np.array(pads, np.int64)),
             const("grid", np.array([-1, 3, 2, 4, 2, 4], np.int64)),
             const("rows", np.array([-1, 4, 48], np.int64)),
             const("w", weights([48, 8], 21))]
    return make(nodes, [value("x", F32, ["images", 3, 8, 8])], [value("y", F32, ["images", 4, 8])], inits,
                opset=opset, check=not any(pads))


@model("pad_zero_unfold")
def _(out):
    return pad_model([0] * 8)


@model("pad_nonzero")
def _(out):
    return pad_model([0, 0, 1, 0, 0, 0, 1, 0])


# ----------------------------------------------------------------------------
# Malformed vision nodes: one defect each, for test/Errors/vision-ops.test.
# ----------------------------------------------------------------------------


def bad_conv(attrs, w_shape=(2, 3, 2, 2)):
    return make([node("Conv", ["x", "w"], ["y"], name="conv", **attrs)],
                [value("x", F32, ["batch", 3, 4, 4])], [value("y", F32, None)],
                [const("w", weights(list(w_shape), 1))], check=False)


@model("conv_bad_pads")
def _(out):
    return bad_conv(dict(pads=[1, 1, 1]))


@model("conv_bad_auto_pad")
def _(out):
    return bad_conv(dict(auto_pad="SAME"))


@model("conv_bad_kernel_shape")
def _(out):
    return bad_conv(dict(kernel_shape=[3, 3]))


@model("conv_bad_channels")
def _(out):
    return bad_conv({}, w_shape=(2, 2, 2, 2))


@model("conv_f16")
def _(out):
    """A valid Conv on f16, which the runtime does not compute."""
    from gen_onnx import helper, numpy_helper, TensorProto
    w = numpy_helper.from_array(weights([2, 3, 2, 2], 1).astype(np.float16), "w")
    return make([node("Conv", ["x", "w"], ["y"], name="conv")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 3, 4, 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 2, 3, 3])], [w])


GRID_MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic")}


def grid_sample_model(opset):
    """x [n, 3, 5, 6] sampled at grid [n, 4, 7, 2] (fresh N(0, 1) points,
    about a third outside [-1, 1]) by one GridSample node per mode,
    padding_mode and align_corners, each its own output."""
    nodes, outputs = [], []
    for mode in GRID_MODES[opset]:
        for padding in ("zeros", "border", "reflection"):
            for align in (0, 1):
                name = f"{mode}_{padding}_{align}"
                nodes.append(node("GridSample", ["x", "grid"], [name], mode=mode, padding_mode=padding,
                                  align_corners=align))
                outputs.append(value(name, F32, ["n", 3, 4, 7]))
    return make(nodes, [value("x", F32, ["n", 3, 5, 6]), value("grid", F32, ["n", 4, 7, 2])], outputs, opset=opset)


@model("grid_sample_opset20")
def _(out):
    return grid_sample_model(20)


@model("grid_sample_opset16")
def _(out):
    return grid_sample_model(16)


@model("glm_pos_embed")
def _(out):
    """GLM-4.5V's position embedding: the table [36, 8] as a [1, 8, 6, 6]
    image, sampled bicubically with border padding at a grid [1, n, 1, 2]
    of patch positions computed in the graph (tanh keeps them inside), then
    [n, 8]."""
    nodes = [
        node("Reshape", ["table", "square"], ["rows"]),
        node("Transpose", ["rows"], ["image"], perm=[0, 3, 1, 2]),
        node("Tanh", ["positions"], ["points"]),
        node("Reshape", ["points", "grid_shape"], ["grid"]),
        node("GridSample", ["image", "grid"], ["sampled"], name="grid_sample", mode="bicubic",
             padding_mode="border", align_corners=0),
        node("Reshape", ["sampled", "rows_shape"], ["flat"]),
        node("Transpose", ["flat"], ["y"], perm=[1, 0]),
    ]
    inits = [const("table", weights([36, 8], 31, scale=1.0)),
             const("square", np.array([1, 6, 6, 8], np.int64)),
             const("grid_shape", np.array([1, -1, 1, 2], np.int64)),
             const("rows_shape", np.array([8, -1], np.int64))]
    return make(nodes, [value("positions", F32, ["n", 2])], [value("y", F32, ["n", 8])], inits, opset=16)


def bad_grid_sample(x_shape, grid_shape, opset=20, **attrs):
    return make([node("GridSample", ["x", "grid"], ["y"], name="grid_sample", **attrs)],
                [value("x", F32, x_shape), value("grid", F32, grid_shape)], [value("y", F32, None)],
                opset=opset, check=False)


@model("grid_sample_bad_mode")
def _(out):
    return bad_grid_sample(["n", 3, 5, 6], ["n", 4, 7, 2], mode="area")


@model("grid_sample_bad_padding")
def _(out):
    return bad_grid_sample(["n", 3, 5, 6], ["n", 4, 7, 2], padding_mode="clamp")


@model("grid_sample_bad_align")
def _(out):
    return bad_grid_sample(["n", 3, 5, 6], ["n", 4, 7, 2], align_corners=2)


@model("grid_sample_5d")
def _(out):
    """GridSample 20's volumetric form, valid ONNX that moec does not run."""
    return make([node("GridSample", ["x", "grid"], ["y"], name="grid_sample")],
                [value("x", F32, ["n", 3, 4, 5, 6]), value("grid", F32, ["n", 2, 3, 4, 3])],
                [value("y", F32, ["n", 3, 2, 3, 4])], opset=20)


@model("grid_sample_f16")
def _(out):
    """A valid GridSample on f16, which the runtime does not compute."""
    from gen_onnx import helper, TensorProto
    return make([node("GridSample", ["x", "grid"], ["y"], name="grid_sample", mode="cubic")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n", 3, 5, 6]),
                 helper.make_tensor_value_info("grid", TensorProto.FLOAT16, ["n", 4, 7, 2])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 3, 4, 7])], opset=20)


def main():
    return gen_onnx.main(MODELS, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
