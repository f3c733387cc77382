#!/usr/bin/env python3
"""Writes a copy of an ONNX model whose matrices 4-bit codes hold exactly.

Every float initializer of rank 2 or more gets the values s * (c - 8), with
one scale s per tensor (a quarter of the original's standard deviation) and
random codes c in [1, 15], except that c is 0 wherever the last two indices
i, j have i - j divisible by 8. Then every run of 8 or more consecutive
elements along either of the last two axes holds -8 s, its element of
largest magnitude, and the q4_0-style quantization of `moec compile
--weight-dtype int4` (a block's scale is that element over -8) recovers s
and every code exactly, for blocks along either axis. A plan of the copy
compiled with --weight-dtype int4 must then compute what onnxruntime
computes on the copy, within float32 rounding: this tests the rewrite, the
plan's packed storage and the kernels, without the quantization error.

    int4_representable.py IN.onnx OUT.onnx [--seed N] [--scale S]
"""

import argparse

import numpy as np
import onnx
from onnx import numpy_helper


def representable(shape, scale, rng):
    codes = rng.integers(1, 16, size=shape)
    rows, cols = shape[-2], shape[-1]
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    codes = np.where((i - j) % 8 == 0, 0, codes)
    return (scale * (codes - 8)).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("output")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float,
                        help="every tensor's s (default: from its values)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    model = onnx.load(args.model)
    count = 0
    for init in model.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT or len(init.dims) < 2:
            continue
        values = numpy_helper.to_array(init)
        if values.size == 0:
            continue
        scale = np.float32(max(float(values.std()), 1e-3) / 4)
        # A power of two keeps s * (c - 8) and its division by s exact.
        scale = np.float32(args.scale or 2.0 ** np.round(np.log2(scale)))
        init.CopyFrom(numpy_helper.from_array(
            representable(values.shape, scale, rng), init.name))
        count += 1
    onnx.save(model, args.output)
    print(f"int4_representable: {count} matrices rewritten")


if __name__ == "__main__":
    main()
