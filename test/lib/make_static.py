#!/usr/bin/env python3
"""Writes a copy of an ONNX model with static input shapes, as
torch.onnx.export writes a model exported without dynamic axes.

    make_static.py IN.onnx OUT.onnx --dim batch=1 --dim seq=5

Every named input dimension takes its --dim value (a numeric name, as
transformers' exporter writes for static sizes, its own value); the graph
outputs keep their element types and lose their shapes (the importer
infers them); intermediate value_info is dropped.
"""

import argparse
import sys

import onnx


def make_static(model, sizes):
    """Fixes `model`'s named input dimensions in place to `sizes` (name ->
    size; a numeric name its own value); raises ValueError naming a
    dimension `sizes` lacks."""
    for value in model.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_param"):
                continue
            name = dim.dim_param
            if name.isdigit():
                size = int(name)
            elif name in sizes:
                size = sizes[name]
            else:
                raise ValueError(f"input '{value.name}' has dimension '{name}': pass --dim {name}=SIZE")
            dim.Clear()
            dim.dim_value = size
    for value in model.graph.output:
        value.type.tensor_type.ClearField("shape")
    del model.graph.value_info[:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--dim", action="append", default=[],
                        help="NAME=SIZE for a named input dimension")
    args = parser.parse_args()
    sizes = {}
    for item in args.dim:
        name, _, size = item.partition("=")
        sizes[name] = int(size)
    model = onnx.load(args.model)
    try:
        make_static(model, sizes)
    except ValueError as error:
        sys.exit(f"make_static: {error}")
    onnx.save(model, args.out)

if __name__ == "__main__":
    main()
