#!/usr/bin/env python3
"""Writes a per-expert loop MoE block of a chosen size, for tests that need
real-size expert weights without committing them.

    gen_loop_moe.py OUT.onnx --hidden H --ffn F [--seed N] [--external]
                    [--skew S]

The graph is examples/zoo/mixtral_block.onnx's TorchScript export (router
MatMul -> Softmax -> TopK -> renormalise -> OneHot; per expert NonZero ->
Gather -> SwiGLU -> Mul -> index_add), whose shape arithmetic reads the hidden
size from the input, with its weights replaced by random ones of hidden size H
and FFN size F (8 experts, top-2). With --external the weights go to
OUT.onnx.data, as large models store them. With --skew S the routing is
skewed on purpose: the router columns of experts 0 and 1 become S * u and
-S * u for one random unit direction u, so (for S well above the other
logits) every token picks one of the two and they get half of all top-2
assignments; tests of load-based placement use it.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import numpy_helper

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                        "examples", "zoo", "mixtral_block.onnx")
TEMPLATE_HIDDEN, TEMPLATE_FFN = 16, 32


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--ffn", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--external", action="store_true")
    parser.add_argument("--skew", type=float, default=0.0)
    args = parser.parse_args()

    model = onnx.load(TEMPLATE)
    graph = model.graph
    sizes = {TEMPLATE_HIDDEN: args.hidden, TEMPLATE_FFN: args.ffn}
    rng = np.random.default_rng(args.seed)
    for index, init in enumerate(graph.initializer):
        dims = list(init.dims)
        # The router is [H, E]; expert weights [H, F] and [F, H].
        shape = [sizes[dims[0]], sizes.get(dims[1], dims[1])]
        weights = rng.standard_normal(shape, dtype=np.float32)
        weights /= np.float32(np.sqrt(shape[0]))
        if args.skew and dims[1] not in sizes:
            direction = rng.standard_normal(shape[0]).astype(np.float32)
            direction /= np.linalg.norm(direction)
            weights[:, 0] = args.skew * direction
            weights[:, 1] = -args.skew * direction
        graph.initializer[index].CopyFrom(
            numpy_helper.from_array(weights, init.name))
    for value in list(graph.input) + list(graph.output):
        value.type.tensor_type.shape.dim[2].dim_value = args.hidden
    del graph.value_info[:]

    if args.external:
        onnx.save(model, args.out, save_as_external_data=True,
                  all_tensors_to_one_file=True,
                  location=os.path.basename(args.out) + ".data",
                  size_threshold=1024)
    else:
        onnx.save(model, args.out)


if __name__ == "__main__":
    main()
