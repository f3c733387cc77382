#!/usr/bin/env python3
"""Writes a near-miss of a zoo MoE block: the export with one small edit that
changes what the layer computes (or what the graph returns), for tests that
the MoE detectors either prove the edited layer or leave it generic.

    mutate_moe.py MUTATION IN.onnx OUT.onnx

Mutations (node names are those of examples/zoo's TorchScript exports):

  slice-ends            mixtral_block: the Slice whose shape expert 0's
                        update is expanded to ends at row 0 instead of 1,
                        which empties expert 0's update (an Expand to zero
                        rows).
  add-operand           mixtral_block: the Add that accumulates expert 1's
                        update reads the zeros the loop starts from where
                        it read expert 0's sum: expert 0's update is lost.
  nonzero-input         mixtral_block: expert 1's NonZero reads expert 0's
                        mask: expert 1 runs on (and updates) expert 0's
                        tokens.
  gather-elements-axis  deepseek_v3_block: the gate's GatherElements of the
                        scores at the top-k indices loses its axis (so
                        gathers along the tokens, axis 0). Gathering by
                        slot then makes the output depend on the order of
                        the top-k, which the export leaves unspecified
                        (sorted=0): that top-k is made sorted, so that the
                        edited model has one answer.
  output-routing        mixtral_block: the graph also returns the
                        renormalised routing weights and the expert indices
                        (two more outputs).
  output-unsorted-topk  deepseek_v3_block: the graph also returns the values
                        and indices of the gate's two TopKs with sorted = 0
                        (the best groups, then the experts), whose order
                        ONNX leaves to the runtime (four more outputs).
  output-input-transposed
                        mixtral_block: a second input `mask [4, seq]` is
                        also returned transposed, `[seq, 4]`: an output the
                        same on every device whose dimension 0 the model
                        names with an input's symbol (not the batch).
"""

import argparse

import numpy as np
import onnx
from onnx import helper, numpy_helper


def find_node(graph, name):
    for node in graph.node:
        if node.name == name:
            return node
    raise SystemExit(f"mutate_moe.py: no node '{name}' in the model")


def constant_value(graph, name):
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return numpy_helper.to_array(node.attribute[0].t)
    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    raise SystemExit(f"mutate_moe.py: '{name}' is not a constant")


def slice_ends(graph):
    node = find_node(graph, "/block/Slice")
    ends = constant_value(graph, node.input[2]).copy()
    assert ends[0] == 1, ends
    ends[0] = 0
    name = node.input[2] + "_mutated"
    graph.initializer.append(numpy_helper.from_array(ends, name))
    node.input[2] = name


def add_operand(graph):
    node = find_node(graph, "/block/Add_4")
    assert node.input[0] == "/block/Add_2_output_0", node.input
    node.input[0] = "/block/ConstantOfShape_output_0"


def nonzero_input(graph):
    node = find_node(graph, "/block/NonZero_1")
    node.input[0] = "/block/Cast_2_output_0"


def gather_elements_axis(graph):
    node = find_node(graph, "/block/gate/GatherElements")
    kept = [a for a in node.attribute if a.name != "axis"]
    assert len(kept) < len(node.attribute), "no axis to remove"
    del node.attribute[:]
    node.attribute.extend(kept)
    for top_k in graph.node:
        if top_k.op_type == "TopK" and node.input[1] in top_k.output:
            for attribute in top_k.attribute:
                if attribute.name == "sorted":
                    attribute.i = 1


def output_routing(graph):
    graph.output.append(helper.make_tensor_value_info(
        "/block/Div_output_0", onnx.TensorProto.FLOAT, None))
    graph.output.append(helper.make_tensor_value_info(
        "/block/TopK_output_1", onnx.TensorProto.INT64, None))


def output_unsorted_topk(graph):
    for name in ("/block/gate/TopK_1", "/block/gate/TopK_2"):
        top_k = find_node(graph, name)
        assert any(a.name == "sorted" and a.i == 0 for a in top_k.attribute)
        graph.output.append(helper.make_tensor_value_info(
            top_k.output[0], onnx.TensorProto.FLOAT, None))
        graph.output.append(helper.make_tensor_value_info(
            top_k.output[1], onnx.TensorProto.INT64, None))


def output_input_transposed(graph):
    graph.input.append(helper.make_tensor_value_info(
        "mask", onnx.TensorProto.FLOAT, [4, "seq"]))
    graph.node.append(helper.make_node("Transpose", ["mask"], ["mask_t"],
                                       name="mask_t", perm=[1, 0]))
    graph.output.append(helper.make_tensor_value_info(
        "mask_t", onnx.TensorProto.FLOAT, ["seq", 4]))


MUTATIONS = {
    "slice-ends": slice_ends,
    "add-operand": add_operand,
    "nonzero-input": nonzero_input,
    "gather-elements-axis": gather_elements_axis,
    "output-routing": output_routing,
    "output-unsorted-topk": output_unsorted_topk,
    "output-input-transposed": output_input_transposed,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mutation", choices=sorted(MUTATIONS))
    parser.add_argument("input")
    parser.add_argument("output")
    args = parser.parse_args()
    model = onnx.load(args.input)
    MUTATIONS[args.mutation](model.graph)
    del model.graph.value_info[:]
    onnx.save(model, args.output)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
