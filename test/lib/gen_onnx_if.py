#!/usr/bin/env python3
"""Builds the ONNX models with If that the lit tests import, by name.

    gen_onnx_if.py NAME OUT.onnx     write model NAME to OUT.onnx
    gen_onnx_if.py --list            list the model names

Valid models (conditions that fold, conditions that do not, nested Ifs,
branches reading the enclosing graphs' values, an opset-11 model, an MoE
block whose router sits in a TorchScript-style `if x.size(2) == 16`) pass
onnx's checker; the malformed ones (named `bad_*`) are built without it and
hold exactly one defect each.
"""

import os
import sys

import numpy as np
import onnx
from onnx import helper

import gen_onnx
from gen_onnx import BOOL, F32, const, make, node, validate, value

MODELS = {}
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def model(name):
    def register(fn):
        MODELS[name] = fn
        return fn

    return register


def branch(name, nodes, outputs, initializers=(), inputs=()):
    return helper.make_graph(nodes, name, list(inputs), outputs,
                             initializer=list(initializers))


def if_node(cond, outputs, then_branch, else_branch, name="if", **attrs):
    return helper.make_node("If", [cond], outputs, name=name,
                            then_branch=then_branch, else_branch=else_branch,
                            **attrs)


def weights(seed, shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(
        np.float32)


X = value("x", F32, ["tokens", 4])
W = const("w", weights(1, [4]))


def relu_or_neg(out="y"):
    """then: Relu(x + w); else: Neg(x * w); both read x and w from the
    enclosing graph."""
    then_branch = branch("then", [node("Add", ["x", "w"], ["t0"]),
                                  node("Relu", ["t0"], ["t"])],
                         [value("t", F32, ["tokens", 4])])
    else_branch = branch("else", [node("Mul", ["x", "w"], ["e0"]),
                                  node("Neg", ["e0"], ["e"])],
                         [value("e", F32, ["tokens", 4])])
    return then_branch, else_branch


@model("constant_true")
def _(out):
    # The condition is a Constant node.
    then_branch, else_branch = relu_or_neg()
    nodes = [helper.make_node("Constant", [], ["c"], name="c",
                              value=helper.make_tensor("v", BOOL, [], [True])),
             if_node("c", ["y"], then_branch, else_branch)]
    return make(nodes, [X], [value("y", F32, ["tokens", 4])], [W])


@model("initializer_false")
def _(out):
    # The condition is an initializer of shape [1].
    then_branch, else_branch = relu_or_neg()
    return make([if_node("c", ["y"], then_branch, else_branch)], [X],
                [value("y", F32, ["tokens", 4])],
                [W, const("c", np.array([False]))])


def static_dim(dim):
    """TorchScript's `if x.size(1) == 1: x.view(x.size(0), 4) else:
    x.sum(1)` on x of shape [tokens, dim, 4]: with dim 2 the view the
    branch not taken asks for does not fit (it would fail at run time), so
    only the taken branch may be imported."""
    nodes = [node("Shape", ["x"], ["s"]),
             node("Gather", ["s", "one"], ["d"], axis=0),
             node("Equal", ["d", "one"], ["c"]),
             if_node("c", ["y"],
                     branch("then", [node("Reshape", ["x", "view"], ["t"])],
                            [value("t", F32, None)]),
                     branch("else", [node("ReduceSum", ["x", "axes"], ["e"],
                                          keepdims=0)],
                            [value("e", F32, None)]))]
    return make(nodes, [value("x", F32, ["tokens", dim, 4])],
                [value("y", F32, ["tokens", 4])],
                [const("one", np.array(1, np.int64)),
                 const("view", np.array([0, 4], np.int64)),
                 const("axes", np.array([1], np.int64))])


model("static_dim_1")(lambda out: static_dim(1))
model("static_dim_2")(lambda out: static_dim(2))


@model("symbolic_dims")
def _(out):
    # dim 0 of x and of Relu(x) is the same symbolic size: the comparison
    # folds although the size is dynamic.
    then_branch, else_branch = relu_or_neg()
    nodes = [node("Relu", ["x"], ["r"]),
             node("Shape", ["x"], ["sx"]), node("Shape", ["r"], ["sr"]),
             node("Gather", ["sx", "zero"], ["dx"], axis=0),
             node("Gather", ["sr", "zero"], ["dr"], axis=0),
             node("Equal", ["dx", "dr"], ["c"]),
             if_node("c", ["y"], then_branch, else_branch)]
    return make(nodes, [X], [value("y", F32, ["tokens", 4])],
                [W, const("zero", np.array(0, np.int64))])


@model("nested")
def _(out):
    # The outer then_branch computes h, then an inner If (cond: x.size(1) >
    # 2, static) reads x and w of the main graph, b (the outer branch's own
    # initializer) and h (the outer branch's node).
    inner_then = branch("inner_then", [node("Add", ["h", "b"], ["it0"]),
                                       node("Mul", ["it0", "w"], ["it"])],
                        [value("it", F32, ["tokens", 4])])
    inner_else = branch("inner_else", [node("Sub", ["x", "b"], ["ie"])],
                        [value("ie", F32, ["tokens", 4])])
    outer_then = branch(
        "outer_then",
        [node("Mul", ["x", "w"], ["h"]),
         node("Shape", ["x"], ["s"]),
         node("Gather", ["s", "one"], ["d"], axis=0),
         node("Greater", ["d", "two"], ["inner_c"]),
         if_node("inner_c", ["ot0"], inner_then, inner_else, name="inner"),
         node("Tanh", ["ot0"], ["ot"])],
        [value("ot", F32, ["tokens", 4])],
        [const("b", weights(2, [4])), const("two", np.array(2, np.int64))])
    outer_else = branch("outer_else", [node("Neg", ["x"], ["oe"])],
                        [value("oe", F32, ["tokens", 4])])
    return make([if_node("c", ["y"], outer_then, outer_else, name="outer")],
                [X], [value("y", F32, ["tokens", 4])],
                [W, const("c", np.array(True)),
                 const("one", np.array(1, np.int64))])


@model("outer_scope")
def _(out):
    # The else_branch taken returns h, a value of the main graph (through
    # Identity, as onnx's checker wants it computed in the branch); the main
    # graph reads h again after the If.
    then_branch = branch("then", [node("Add", ["h", "w"], ["t"])],
                         [value("t", F32, ["tokens", 4])])
    else_branch = branch("else", [node("Identity", ["h"], ["e"])],
                         [value("e", F32, ["tokens", 4])])
    nodes = [node("Sigmoid", ["x"], ["h"]),
             if_node("c", ["y0"], then_branch, else_branch),
             node("Add", ["y0", "h"], ["y"])]
    return make(nodes, [X], [value("y", F32, ["tokens", 4])],
                [W, const("c", np.array(False))])


def two_outputs(cond_nodes, inputs, initializers=()):
    """Branches of matching static types, two outputs each: then: (x * w,
    sum over axis 1 of x); else: (sigmoid(x), max over axis 1 of x)."""
    then_branch = branch("then", [node("Mul", ["x", "w"], ["t"]),
                                  node("ReduceSum", ["x", "axes"], ["ts"],
                                       keepdims=0)],
                         [value("t", F32, [3, 4]), value("ts", F32, [3])])
    else_branch = branch("else", [node("Sigmoid", ["x"], ["e"]),
                                  node("ReduceMax", ["x", "axes"], ["es"],
                                       keepdims=0)],
                         [value("e", F32, [3, 4]), value("es", F32, [3])])
    nodes = cond_nodes + [if_node("c", ["y", "z"], then_branch, else_branch)]
    return make(nodes, inputs, [value("y", F32, [3, 4]), value("z", F32, [3])],
                [W, const("axes", np.array([1], np.int64))] +
                list(initializers))


@model("input_cond")
def _(out):
    # The condition is a bool graph input: it cannot fold.
    return two_outputs([], [value("x", F32, [3, 4]), value("c", BOOL, [])])


@model("data_cond")
def _(out):
    # The condition is computed from the data: sum(x) > 0.
    nodes = [node("ReduceSum", ["x"], ["total"], keepdims=0),
             node("Greater", ["total", "zero"], ["c"])]
    return two_outputs(nodes, [value("x", F32, [3, 4])],
                       [const("zero", np.array(0, np.float32))])


@model("opset_11")
def _(out):
    # An opset-11 model: Squeeze and ReduceSum inside the branches take
    # their axes as attributes, which onnx's version converter turns into
    # inputs inside the subgraphs.
    nodes = [node("Shape", ["x"], ["s"]),
             node("Gather", ["s", "one"], ["d"], axis=0),
             node("Equal", ["d", "one"], ["c"]),
             if_node("c", ["y"],
                     branch("then", [node("Squeeze", ["x"], ["t"], axes=[1])],
                            [value("t", F32, ["tokens", 4])]),
                     branch("else", [node("ReduceSum", ["x"], ["e"], axes=[1],
                                          keepdims=0)],
                            [value("e", F32, ["tokens", 4])]))]
    return make(nodes, [value("x", F32, ["tokens", 1, 4])],
                [value("y", F32, ["tokens", 4])],
                [const("one", np.array(1, np.int64))], opset=11)


@model("moe_block")
def _(out):
    # examples/zoo/mixtral_block.onnx (TorchScript) with its router computed
    # as TorchScript writes `if hidden_states.size(2) == 16: logits = gate(x)
    # else: logits = gate(x) * 2` (the branches differ so that a wrong pick
    # shows): the hidden size is static, so the condition folds.
    m = onnx.load(os.path.join(ROOT, "examples", "zoo", "mixtral_block.onnx"))
    graph = m.graph
    index = next(i for i, n in enumerate(graph.node)
                 if n.name == "/block/gate/MatMul")
    gate = graph.node[index]
    x, w, logits = gate.input[0], gate.input[1], gate.output[0]
    then_branch = branch("then", [node("MatMul", [x, w], ["then_logits"],
                                       name="/block/gate/MatMul")],
                         [value("then_logits", F32, None)])
    else_branch = branch("else", [node("MatMul", [x, w], ["else_mm"]),
                                  node("Mul", ["else_mm", "if_two"],
                                       ["else_logits"])],
                         [value("else_logits", F32, None)])
    new_nodes = [node("Shape", ["hidden_states"], ["if_shape"]),
                 node("Gather", ["if_shape", "if_two_i"], ["if_hidden"],
                      axis=0),
                 node("Equal", ["if_hidden", "if_sixteen"], ["if_cond"]),
                 if_node("if_cond", [logits], then_branch, else_branch,
                         name="/block/If")]
    nodes = list(graph.node)
    nodes[index:index + 1] = new_nodes
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend([const("if_two_i", np.array(2, np.int64)),
                              const("if_sixteen", np.array(16, np.int64)),
                              const("if_two", np.array(2, np.float32))])
    return validate(m)


# ---------------------------------------------------------------------------
# Malformed Ifs: one defect each.


def bad(nodes, inputs=(X,), initializers=(W,)):
    return make(nodes, list(inputs), [value("y", F32, None)],
                list(initializers) + [const("c", np.array(True))],
                check=False)


@model("bad_no_then")
def _(out):
    _, else_branch = relu_or_neg()
    return bad([helper.make_node("If", ["c"], ["y"], name="if",
                                 else_branch=else_branch)])


@model("bad_then_type")
def _(out):
    _, else_branch = relu_or_neg()
    return bad([helper.make_node("If", ["c"], ["y"], name="if", then_branch=3,
                                 else_branch=else_branch)])


@model("bad_output_count")
def _(out):
    then_branch, else_branch = relu_or_neg()
    then_branch.output.append(value("x", F32, None))
    return bad([if_node("c", ["y"], then_branch, else_branch)])


@model("bad_empty_branch")
def _(out):
    _, else_branch = relu_or_neg()
    return bad([if_node("c", ["y"], branch("then", [], []), else_branch)])


@model("bad_branch_inputs")
def _(out):
    then_branch, else_branch = relu_or_neg()
    then_branch.input.append(value("extra", F32, [4]))
    return bad([if_node("c", ["y"], then_branch, else_branch)])


@model("bad_undefined")
def _(out):
    then_branch = branch("then", [node("Add", ["x", "nowhere"], ["t"],
                                       name="add")],
                         [value("t", F32, None)])
    _, else_branch = relu_or_neg()
    return bad([if_node("c", ["y"], then_branch, else_branch)])


@model("bad_leak")
def _(out):
    # The main graph reads t0, a value of the then_branch.
    then_branch, else_branch = relu_or_neg()
    return bad([if_node("c", ["y0"], then_branch, else_branch),
                 node("Add", ["y0", "t0"], ["y"], name="add")])


@model("bad_shadow")
def _(out):
    # A node of the branch redefines x, a graph input.
    then_branch = branch("then", [node("Relu", ["w"], ["x"], name="relu")],
                         [value("x", F32, None)])
    _, else_branch = relu_or_neg()
    return bad([if_node("c", ["y"], then_branch, else_branch)])


@model("bad_cycle")
def _(out):
    # The branch reads z, which is computed from the If's own output.
    then_branch = branch("then", [node("Add", ["x", "z"], ["t"])],
                         [value("t", F32, None)])
    _, else_branch = relu_or_neg()
    return bad([if_node("c", ["y0"], then_branch, else_branch),
                node("Relu", ["y0"], ["z"], name="relu"),
                node("Neg", ["z"], ["y"], name="neg")])


@model("bad_deep")
def _(out):
    # Ifs nested 20 deep.
    _, else_branch = relu_or_neg()
    inner = branch("b20", [node("Relu", ["x"], ["r20"])],
                   [value("r20", F32, None)])
    for level in range(19, -1, -1):
        inner = branch(f"b{level}",
                       [if_node("c", [f"r{level}"], inner, else_branch,
                                name=f"if{level}")],
                       [value(f"r{level}", F32, None)])
    return bad([if_node("c", ["y"], inner, else_branch)])


@model("bad_unsupported")
def _(out):
    then_branch = branch("then", [node("Det", ["x"], ["t"], name="det")],
                         [value("t", F32, None)])
    _, else_branch = relu_or_neg()
    return bad([if_node("c", ["y"], then_branch, else_branch)])


@model("bad_cond_type")
def _(out):
    then_branch, else_branch = relu_or_neg()
    return bad([if_node("f", ["y"], then_branch, else_branch)],
               initializers=[W, const("f", np.array(1.0, np.float32))])


@model("bad_extra_attribute")
def _(out):
    then_branch, else_branch = relu_or_neg()
    return bad([if_node("c", ["y"], then_branch, else_branch, axis=1)])


def not_folding(then_nodes, then_out, else_nodes, else_out, x_shape,
                initializers=()):
    return bad([if_node("cond", ["y"], branch("then", then_nodes, [then_out]),
                        branch("else", else_nodes, [else_out]))],
               inputs=[value("x", F32, x_shape), value("cond", BOOL, [])],
               initializers=[W, const("idx", np.array([0], np.int64))] +
               list(initializers))


@model("bad_rank")
def _(out):
    return not_folding([node("Squeeze", ["x", "idx"], ["t"])],
                       value("t", F32, None), [], value("x", F32, None),
                       [1, 4])


@model("bad_shapes")
def _(out):
    # [1, 4] and [3, 4]: Where would broadcast them to [3, 4].
    return not_folding([node("ReduceSum", ["x", "idx"], ["t"], keepdims=1)],
                       value("t", F32, None), [], value("x", F32, None),
                       [3, 4])


@model("bad_dynamic")
def _(out):
    return not_folding([node("Relu", ["x"], ["t"], name="relu")],
                       value("t", F32, None),
                       [node("Neg", ["x"], ["e"])], value("e", F32, None),
                       ["tokens", 4])


@model("bad_index")
def _(out):
    # The else_branch gathers rows by an index computed at run time.
    return not_folding([node("Relu", ["x"], ["t"])], value("t", F32, None),
                       [node("ArgMax", ["x"], ["i"], axis=0, keepdims=0),
                        node("Gather", ["x", "i"], ["e"], axis=0,
                             name="gather")],
                       value("e", F32, None), [4, 4])


@model("bad_constant_index")
def _(out):
    # The then_branch gathers row 5 of 4, a constant index out of range:
    # harmless when the branch is not taken, an error when it runs anyway.
    return not_folding([node("Gather", ["x", "rows"], ["t"], axis=0,
                             name="gather")], value("t", F32, None),
                       [node("Relu", ["x"], ["e"])], value("e", F32, None),
                       [4, 4], [const("rows", np.array([5, 0, 1, 2]))])


def main():
    return gen_onnx.main(MODELS, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
