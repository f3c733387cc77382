#!/usr/bin/env python3
"""Writes a variant of an onnxruntime-genai export (examples/zoo/genai/NAME)
whose GroupQueryAttention has no first-prompt form, for tests that `moec
compile` then plans no prefill schedule, says why with --verbose, and still
generates.

    mutate_genai_attention.py MUTATION EXPORT_DIR OUT_DIR

OUT_DIR gets model.onnx (with EXPORT_DIR's model.onnx.data beside it) and,
for check_genai.py, EXPORT_DIR's reference.json and logits.npz, which the
edit leaves as they were. Mutations (of the last GroupQueryAttention, the
last layer's, without a window in the zoo's gpt-oss):

  attention-bias  input 10 (attention_bias) is a [1, 1, 1, 1] zero: the
                  scores are unchanged.
  non-causal      causal 0: query i sees every key up to seqlens_k. On the
                  last layer that changes no logit: its keys and values
                  come from the layer below, and the logits read only the
                  step's last row, which sees every key either way.
"""

import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

ATTENTION_BIAS = 10


def last_attention(graph):
    nodes = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    if not nodes:
        sys.exit("mutate_genai_attention.py: the model has no "
                 "GroupQueryAttention")
    return nodes[-1]


def add_attention_bias(graph, node):
    name = node.name + "/zero_attention_bias"
    graph.initializer.append(numpy_helper.from_array(
        np.zeros((1, 1, 1, 1), np.float32), name))
    while len(node.input) <= ATTENTION_BIAS:
        node.input.append("")
    node.input[ATTENTION_BIAS] = name


def make_non_causal(graph, node):
    kept = [a for a in node.attribute if a.name != "causal"]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute("causal", 0))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mutation", choices=["attention-bias", "non-causal"])
    parser.add_argument("export_dir")
    parser.add_argument("out_dir")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    model = onnx.load(os.path.join(args.export_dir, "model.onnx"),
                      load_external_data=False)
    node = last_attention(model.graph)
    if args.mutation == "attention-bias":
        add_attention_bias(model.graph, node)
    else:
        make_non_causal(model.graph, node)
    onnx.save(model, os.path.join(args.out_dir, "model.onnx"))
    shutil.copy(os.path.join(args.export_dir, "model.onnx.data"),
                args.out_dir)

    for name in ("reference.json", "logits.npz"):
        shutil.copy(os.path.join(args.export_dir, name), args.out_dir)
    print(f"{args.mutation}: {node.name}")


if __name__ == "__main__":
    main()
