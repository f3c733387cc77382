#!/usr/bin/env python3
"""Builds the small ONNX models the lit tests import, by name, at test time.

    gen_onnx.py NAME OUT.onnx     write model NAME to OUT.onnx (and any
                                  external data or symlinks next to it)
    gen_onnx.py --list            list the model names

Valid models are checked with onnx.checker before they are written. The
malformed ones (truncated protobufs, external data escaping the model's
directory, cycles, ...) are built field by field, since onnx.helper and the
checker refuse to make them; each holds exactly one defect.
"""

import argparse
import os
import random
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# The IR version each opset came with (what exporters write).
IR_VERSION = {7: 3, 8: 3, 9: 4, 10: 5, 11: 6, 12: 7, 13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10,
              22: 10, 23: 11, 24: 12}

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL

MODELS = {}


def model(name):
    """Registers a builder: fn(out_path) -> ModelProto or None (wrote itself)."""

    def register(fn):
        MODELS[name] = fn
        return fn

    return register


def value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def make(nodes, inputs, outputs, initializers=(), opset=21, domains=(),
         ir_version=None, check=True):
    graph = helper.make_graph(nodes, "test", inputs, outputs,
                              initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in domains]
    m = helper.make_model(graph, opset_imports=opsets,
                          producer_name="gen_onnx.py")
    m.ir_version = ir_version or IR_VERSION.get(opset, 10)
    return validate(m) if check else m


def validate(m):
    """Strict shape inference (every node must be valid; it also fills in
    the output shapes left open), then the checker."""
    m = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    del m.graph.value_info[:]
    onnx.checker.check_model(m)
    return m


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def node(op, inputs, outputs, name=None, domain=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or outputs[0],
                            domain=domain, **attrs)


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def external(tensor_name, dims, location, offset=None, length=None,
             elem=F32):
    """An initializer whose data lives in an external file."""
    t = TensorProto()
    t.name = tensor_name
    t.data_type = elem
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    for key, val in entries:
        e = t.external_data.add()
        e.key, e.value = key, val
    return t


def matmul_model(weight, opset=17, check=True):
    """y = x @ w for an initializer `w` of shape [4, 8]."""
    return make([node("MatMul", ["x", "w"], ["y"], name="mm")],
                [value("x", F32, ["tokens", 4])],
                [value("y", F32, ["tokens", 8])], [weight], opset=opset,
                check=check)


# ----------------------------------------------------------------------------
# Valid models: one per op family, opset upgrades, signatures, weights.
# ----------------------------------------------------------------------------


@model("elementwise")
def _(out):
    # Float ops on x [T, 4] and y [4]; integer and bool ops on their own
    # inputs. Every result is a graph output so nothing is dead.
    f = ["x", "y"]
    nodes = [
        node("Add", f, ["add"]), node("Sub", f, ["sub"]),
        node("Mul", f, ["mul"]), node("Div", f, ["div"]),
        node("Pow", f, ["pow"]),
        node("Mod", ["i", "j"], ["mod"], fmod=0),
        node("Max", ["x", "y", "x"], ["max"]), node("Min", f, ["min"]),
        node("Sum", ["x", "y", "x"], ["sum"]),
        node("Neg", ["x"], ["neg"]), node("Abs", ["x"], ["abs"]),
        node("Exp", ["x"], ["exp"]), node("Log", ["x"], ["log"]),
        node("Sqrt", ["x"], ["sqrt"]),
        node("Reciprocal", ["x"], ["reciprocal"]),
        node("Tanh", ["x"], ["tanh"]), node("Erf", ["x"], ["erf"]),
        node("Sin", ["x"], ["sin"]), node("Cos", ["x"], ["cos"]),
        node("Floor", ["x"], ["floor"]), node("Ceil", ["x"], ["ceil"]),
        node("Sigmoid", ["x"], ["sigmoid"]), node("Relu", ["x"], ["relu"]),
        node("Softplus", ["x"], ["softplus"]),
        node("Gelu", ["x"], ["gelu"], approximate="tanh"),
        node("Clip", ["x", "lo", "hi"], ["clip"]),
        # Clip without `min`: the empty name leaves an optional operand out.
        node("Clip", ["x", "", "hi"], ["clip_max"]),
    ]
    outputs = [n.output[0] for n in nodes]
    elem = {"mod": I64}
    return make(nodes,
                [value("x", F32, ["tokens", 4]), value("y", F32, [4]),
                 value("i", I64, ["tokens", 4]), value("j", I64, [4])],
                [value(o, elem.get(o, F32), None) for o in outputs],
                [const("lo", np.float32(-1)), const("hi", np.float32(1))])


@model("logic")
def _(out):
    nodes = [
        node("Equal", ["x", "y"], ["eq"]), node("Less", ["x", "y"], ["lt"]),
        node("LessOrEqual", ["x", "y"], ["le"]),
        node("Greater", ["x", "y"], ["gt"]),
        node("GreaterOrEqual", ["x", "y"], ["ge"]),
        node("And", ["eq", "lt"], ["and"]), node("Or", ["gt", "ge"], ["or"]),
        node("Not", ["le"], ["not"]),
        node("Where", ["and", "x", "y"], ["where"]),
    ]
    return make(nodes, [value("x", F32, ["tokens", 4]), value("y", F32, [4])],
                [value("or", BOOL, None), value("not", BOOL, None),
                 value("where", F32, None)])


@model("neural_net")
def _(out):
    nodes = [
        node("MatMul", ["x", "w"], ["mm"]),
        node("Gemm", ["x", "wt", "b"], ["gemm"], transB=1, alpha=0.5),
        node("Einsum", ["x", "w"], ["einsum"], equation="tk,kn->tn"),
        node("Softmax", ["mm"], ["softmax"], axis=-1),
        node("LogSoftmax", ["mm"], ["log_softmax"], axis=1),
        # Only Y is used; Mean and InvStdDev are still results of the op.
        node("LayerNormalization", ["x", "gamma", "beta"], ["ln"],
             axis=-1, epsilon=1e-5),
    ]
    rng = np.random.default_rng(0)
    inits = [const("w", rng.standard_normal((4, 8), np.float32)),
             const("wt", rng.standard_normal((8, 4), np.float32)),
             const("b", np.zeros(8, np.float32)),
             const("gamma", np.ones(4, np.float32)),
             const("beta", np.zeros(4, np.float32))]
    outs = ["gemm", "einsum", "softmax", "log_softmax", "ln"]
    return make(nodes, [value("x", F32, ["tokens", 4])],
                [value(o, F32, None) for o in outs], inits)


@model("rms_norm")
def _(out):
    # onnxruntime's RMSNorm, registered in the default domain; not an ONNX
    # op, so onnx.checker does not know it.
    n = node("SimplifiedLayerNormalization", ["x", "gamma"], ["y"],
             axis=-1, epsilon=1e-6)
    return make([n], [value("x", F32, ["tokens", 4])], [value("y", F32, None)],
                [const("gamma", np.ones(4, np.float32))], opset=17,
                check=False)


@model("shape")
def _(out):
    nodes = [
        node("Reshape", ["x", "shape"], ["reshape"]),
        node("Transpose", ["x"], ["transpose"], perm=[1, 0]),
        node("Unsqueeze", ["x", "axes0"], ["unsqueeze"]),
        node("Squeeze", ["unsqueeze", "axes0"], ["squeeze"]),
        node("Flatten", ["unsqueeze"], ["flatten"], axis=1),
        node("Concat", ["x", "x"], ["concat"], axis=1),
        node("Split", ["x"], ["split_a", "split_b"], axis=1, num_outputs=2),
        node("Split", ["x", "sizes"], ["split_c", "split_d"], axis=1),
        node("Slice", ["x", "starts", "ends", "axes1"], ["slice"]),
        # Steps without axes: the empty name leaves `axes` out.
        node("Slice", ["x", "starts", "ends", "", "steps"], ["slice_steps"]),
        node("Expand", ["y", "expand_shape"], ["expand"]),
        node("Tile", ["x", "repeats"], ["tile"]),
        node("Trilu", ["square"], ["trilu"], upper=0),
        node("Shape", ["x"], ["shape_of"]),
        node("Size", ["x"], ["size"]),
        node("Range", ["zero", "limit", "one"], ["range"]),
        node("ConstantOfShape", ["shape_of"], ["zeros"],
             value=helper.make_tensor("value", F32, [1], [0.0])),
    ]
    inits = [const("shape", np.array([-1, 2, 2], np.int64)),
             const("axes0", np.array([0], np.int64)),
             const("axes1", np.array([1], np.int64)),
             const("sizes", np.array([1, 3], np.int64)),
             const("starts", np.array([1], np.int64)),
             const("ends", np.array([3], np.int64)),
             const("steps", np.array([2], np.int64)),
             const("expand_shape", np.array([3, 4], np.int64)),
             const("repeats", np.array([1, 2], np.int64)),
             const("zero", np.int64(0)), const("one", np.int64(1)),
             const("limit", np.int64(5))]
    outs = [n.output for n in nodes if n.op_type not in ("Unsqueeze",)]
    outs = [o for group in outs for o in group]
    elem = {"shape_of": I64, "size": I64, "range": I64}
    return make(nodes,
                [value("x", F32, ["tokens", 4]), value("y", F32, [4]),
                 value("square", F32, [4, 4])],
                [value(o, elem.get(o, F32), None) for o in outs], inits)


@model("indexing")
def _(out):
    nodes = [
        node("Gather", ["table", "ids"], ["gather"], axis=0),
        node("GatherElements", ["x", "idx"], ["gather_elements"], axis=1),
        node("GatherND", ["x", "nd"], ["gather_nd"], batch_dims=0),
        node("ScatterND", ["x", "nd", "rows"], ["scatter_nd"],
             reduction="add"),
        node("ScatterElements", ["x", "idx", "upd"], ["scatter_elements"],
             axis=1, reduction="add"),
        node("TopK", ["x", "k"], ["topk_values", "topk_indices"], axis=-1),
        node("ArgMax", ["x"], ["argmax"], axis=1, keepdims=0),
        node("OneHot", ["topk_indices", "depth", "onoff"], ["onehot"],
             axis=-1),
        node("NonZero", ["mask"], ["nonzero"]),
        node("CumSum", ["x", "axis"], ["cumsum"]),
    ]
    inits = [const("table", np.arange(32, dtype=np.float32).reshape(8, 4)),
             const("nd", np.array([[0], [1]], np.int64)),
             const("rows", np.ones((2, 4), np.float32)),
             const("k", np.array([2], np.int64)),
             const("depth", np.int64(4)),
             const("onoff", np.array([0, 1], np.int64)),
             const("axis", np.int64(1))]
    outs = {"gather": F32, "gather_elements": F32, "gather_nd": F32,
            "scatter_nd": F32, "scatter_elements": F32, "topk_values": F32,
            "argmax": I64, "onehot": I64, "nonzero": I64, "cumsum": F32}
    return make(nodes,
                [value("x", F32, [3, 4]), value("ids", I64, ["tokens"]),
                 value("idx", I64, [3, 2]), value("upd", F32, [3, 2]),
                 value("mask", BOOL, ["tokens", 4])],
                [value(o, e, None) for o, e in outs.items()], inits)


def reductions(opset):
    """Each reduction with axes; at 13 the non-Sum ones carry an attribute."""
    as_attr = opset < 18
    nodes = [node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0)]
    for op in ("ReduceMean", "ReduceMax", "ReduceMin"):
        out = op[len("Reduce"):].lower()
        if as_attr:
            nodes.append(node(op, ["x"], [out], axes=[-1], keepdims=1))
        else:
            nodes.append(node(op, ["x", "axes"], [out], keepdims=1))
    # No axes: reduce over everything in both forms.
    nodes.append(node("ReduceMean", ["x"], ["mean_all"], keepdims=0))
    outs = ["sum", "mean", "max", "min", "mean_all"]
    return make(nodes, [value("x", F32, ["tokens", 8])],
                [value(o, F32, None) for o in outs],
                [const("axes", np.array([-1], np.int64))], opset=opset)


def splits(opset):
    nodes = [node("Split", ["x"], ["a", "b"], axis=1)]
    if opset >= 18:
        nodes[0].attribute.append(helper.make_attribute("num_outputs", 2))
    nodes.append(node("Split", ["x", "sizes"], ["c", "d"], axis=1))
    return make(nodes, [value("x", F32, ["tokens", 8])],
                [value(o, F32, None) for o in "abcd"],
                [const("sizes", np.array([3, 5], np.int64))], opset=opset)


EXTRA_REDUCTIONS = ("ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                    "ReduceLogSum", "ReduceLogSumExp")


def extra_reductions(opset):
    """The reductions beyond Sum/Mean/Max/Min over x [tokens, 3, 8]: over the
    last axis (an attribute at 13, an input at 18), over axes [0, 2] with
    keepdims, and over everything. LogSum reads |x| + 0.5 (its sum is then
    positive); the others read x."""
    as_attr = opset < 18
    nodes = [node("Abs", ["x"], ["abs"]), node("Add", ["abs", "half"], ["pos"])]
    outs = []
    for op in EXTRA_REDUCTIONS:
        data = "pos" if op == "ReduceLogSum" else "x"
        name = op[len("Reduce"):].lower()
        for suffix, axes, keep in (("last", [-1], 0), ("outer", [0, 2], 1),
                                   ("all", None, 0)):
            out = f"{name}_{suffix}"
            if axes is None:
                nodes.append(node(op, [data], [out], keepdims=keep))
            elif as_attr:
                nodes.append(node(op, [data], [out], axes=axes,
                                  keepdims=keep))
            else:
                nodes.append(node(op, [data, f"axes_{suffix}"], [out],
                                  keepdims=keep))
            outs.append(out)
    return make(nodes, [value("x", F32, ["tokens", 3, 8])],
                [value(o, F32, None) for o in outs],
                [const("axes_last", np.array([-1], np.int64)),
                 const("axes_outer", np.array([0, 2], np.int64)),
                 const("half", np.array(0.5, np.float32))], opset=opset)


# The same graphs at opset 13 (attribute forms) and 18 (input forms).
for _opset in (13, 18):
    model(f"reductions_{_opset}")(lambda out, v=_opset: reductions(v))
    model(f"reductions_extra_{_opset}")(
        lambda out, v=_opset: extra_reductions(v))
    model(f"split_{_opset}")(lambda out, v=_opset: splits(v))


@model("digit_dim_params")
def _(out):
    # transformers' exporter names static sizes by their digits: '2' and '8'
    # are sizes, 'tokens' is the token count.
    nodes = [node("MatMul", ["x", "w"], ["h"]),
             node("Reshape", ["h", "flat"], ["y"])]
    return make(nodes, [value("x", F32, ["2", "tokens", "8"])],
                [value("y", F32, ["tokens2", "4"])],
                [const("w", np.random.default_rng(3).standard_normal(
                    (8, 4)).astype(np.float32)),
                 const("flat", np.array([-1, 4], np.int64))])


@model("digit_dim_param_overflow")
def _(out):
    m = small_valid()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "9" * 20
    return m


@model("reduce_l2_int")
def _(out):
    return make([node("ReduceL2", ["x"], ["y"], name="l2", keepdims=0)],
                [value("x", I64, ["tokens", 4])], [value("y", I64, None)],
                opset=18)


# (k, largest) of the unsorted TopKs over 16 values per row: k = 2, 3 and
# 5 keep a heap in onnxruntime's CPU kernel, k = 8 (log2 k / log2 n = 0.75)
# and k = 16 select with nth_element (runtime/src/kernels/reduction.cpp).
TOPK_UNSORTED_ROWS = ((2, 1), (3, 0), (5, 1), (8, 1), (8, 0), (16, 1))
# (k, largest) along axis 0 of 12 rows: k = 6 (0.721) a heap, k = 7 (0.783)
# nth_element.
TOPK_UNSORTED_COLUMNS = ((6, 1), (7, 0))


@model("topk_unsorted")
def _(out):
    """TopK with sorted = 0, whose order the consumers depend on: the values
    scaled by their position (1, 2, ..., k) and the indices as they are.
    Each runs on q = Ceil(1.5 x) (many ties: about 8 distinct values per
    row) and the k = 8 one also on x itself (no ties)."""
    nodes = [node("Mul", ["x", "scale"], ["sx"]), node("Ceil", ["sx"], ["q"]),
             node("Mul", ["y", "scale"], ["sy"]), node("Ceil", ["sy"], ["qy"])]
    inits = [const("scale", np.array(1.5, np.float32))]
    outs = []

    def topk(data, k, largest, axis, tag):
        name = f"{tag}_k{k}_{'max' if largest else 'min'}"
        shape = [1] * 2
        shape[axis] = k
        inits.append(const(f"{name}_k", np.array([k], np.int64)))
        inits.append(const(f"{name}_pos", np.arange(
            1, k + 1, dtype=np.float32).reshape(shape)))
        nodes.append(node("TopK", [data, f"{name}_k"],
                          [f"{name}_v", f"{name}_i"], name=name, axis=axis,
                          largest=largest, sorted=0))
        nodes.append(node("Mul", [f"{name}_v", f"{name}_pos"],
                          [f"{name}_weighted"]))
        outs.append(value(f"{name}_weighted", F32, None))
        outs.append(value(f"{name}_i", I64, None))

    for k, largest in TOPK_UNSORTED_ROWS:
        topk("q", k, largest, 1, "rows")
    topk("x", 8, 1, 1, "distinct")
    for k, largest in TOPK_UNSORTED_COLUMNS:
        topk("qy", k, largest, 0, "columns")
    return make(nodes, [value("x", F32, ["tokens", 16]),
                        value("y", F32, [12, "tokens"])], outs, inits)


def new_versions(opset):
    """Versions new at opsets 22 to 24 whose semantics are the older ones':
    Softplus-22, Sin-22, Cast-23/24 (24's round_mode only rounds to
    float8e8m0), Reshape, Transpose, TopK-24."""
    cast = {"round_mode": "nearest"} if opset >= 24 else {}
    nodes = [node("Softplus", ["x"], ["sp"]), node("Sin", ["sp"], ["s"]),
             node("Cast", ["s"], ["c"], to=TensorProto.FLOAT, **cast),
             node("Reshape", ["c", "shape"], ["r"]),
             node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
             node("TopK", ["t", "k"], ["values", "indices"], axis=-1)]
    # onnxruntime 1.23 reads IR versions up to 11.
    return make(nodes, [value("x", F32, ["tokens", 8])],
                [value("values", F32, None), value("indices", I64, None)],
                [const("shape", np.array([-1, 2, 4], np.int64)),
                 const("k", np.array([1], np.int64))], opset=opset,
                ir_version=11)


for _opset in (23, 24):
    model(f"opset_{_opset}")(lambda out, v=_opset: new_versions(v))


@model("cast24_round_mode")
def _(out):
    n = node("Cast", ["x"], ["y"], name="cast", to=TensorProto.FLOAT,
             round_mode="sideways")
    return make([n], [value("x", F32, ["tokens", 4])], [value("y", F32, None)],
                opset=24, check=False)


@model("is_nan")
def _(out):
    # torch's SDPA export: Where(IsNaN(s), 0, s), here on s = log(x), which
    # is NaN for the negative half of random inputs.
    nodes = [node("Log", ["x"], ["s"]), node("IsNaN", ["s"], ["nan"]),
             node("Where", ["nan", "zero", "s"], ["y"])]
    return make(nodes, [value("x", F32, ["tokens", 8])],
                [value("y", F32, ["tokens", 8]),
                 value("nan", BOOL, ["tokens", 8])],
                [const("zero", np.array(0.0, np.float32))])


@model("scalar_axes")
def _(out):
    # Unsqueeze with a scalar axes input, which onnxruntime reads as one axis
    # (a fuzz find: moec wrote the scalar and the runtime refused the plan).
    nodes = [node("Unsqueeze", ["x", "axis"], ["y"]),
             node("Unsqueeze", ["x", "last"], ["z"])]
    return make(nodes, [value("x", F32, ["tokens", 4])],
                [value("y", F32, [1, "tokens", 4]),
                 value("z", F32, ["tokens", 4, 1])],
                [const("axis", np.array(0, np.int64)),
                 const("last", np.array(-1, np.int64))])


@model("scalar_axes_input")
def _(out):
    # The scalar axes as a graph input: its value is known only at run time.
    nodes = [node("Unsqueeze", ["x", "axis"], ["y"])]
    return make(nodes, [value("x", F32, ["tokens", 4]),
                        value("axis", I64, [])],
                [value("y", F32, [None, None, None])], [])


@model("tensor")
def _(out):
    big = np.arange(100, dtype=np.float32)
    nodes = [
        node("Constant", [], ["c_tensor"],
             value=numpy_helper.from_array(np.array([1, 2], np.int64))),
        # A large Constant is a weight: a dense_resource blob.
        node("Constant", [], ["c_big"], value=numpy_helper.from_array(big)),
        node("Constant", [], ["c_float"], value_float=0.5),
        node("Constant", [], ["c_floats"], value_floats=[1.0, 2.0]),
        node("Constant", [], ["c_int"], value_int=7),
        node("Constant", [], ["c_ints"], value_ints=[3, 4, 5]),
        node("Cast", ["x"], ["cast"], to=TensorProto.FLOAT16),
        node("CastLike", ["c_ints", "x"], ["cast_like"]),
        # Identity creates no op: its output is its input.
        node("Identity", ["x"], ["identity"]),
    ]
    outs = {"c_tensor": I64, "c_big": F32, "c_float": F32, "c_floats": F32,
            "c_int": I64, "c_ints": I64, "cast": TensorProto.FLOAT16,
            "cast_like": F32, "identity": F32}
    return make(nodes, [value("x", F32, ["tokens", 4])],
                [value(o, e, None) for o, e in outs.items()])


@model("signature")
def _(out):
    # Symbolic, anonymous and static dimensions; an output named like an
    # input's dimension; a weight listed as a graph input too (older
    # exporters): it is imported as the constant, not an argument.
    x = helper.make_tensor_value_info("x", F32, ["batch", None, 4])
    w = helper.make_tensor_value_info("w", F32, [4, 2])
    nodes = [node("MatMul", ["x", "w"], ["y"])]
    return make(nodes, [x, w], [value("y", F32, ["batch", "seq", 2])],
                [const("w", np.ones((4, 2), np.float32))])


@model("unsorted")
def _(out):
    # Nodes listed consumers first: imported in a topological order.
    nodes = [node("Mul", ["b", "b"], ["c"]), node("Neg", ["a"], ["b"]),
             node("Abs", ["x"], ["a"])]
    # Valid ONNX, but onnx.checker wants nodes sorted.
    return make(nodes, [value("x", F32, [4])], [value("c", F32, [4])],
                check=False)


@model("weights")
def _(out):
    # Small initializers stay dense elements; large ones (> 64 elements)
    # become dense_resource blobs, whether in raw_data or in a typed field.
    rng = np.random.default_rng(0)
    raw = const("w_raw", rng.standard_normal((16, 8), np.float32))
    typed = helper.make_tensor("w_typed", F32, [8, 16],
                               np.arange(128, dtype=np.float32).tolist())
    half = const("w_half", np.arange(128, dtype=np.float16).reshape(16, 8))
    mask = const("mask", np.array([True, False, True, True]))
    shape = const("shape", np.array([-1, 16], np.int64))
    nodes = [
        node("MatMul", ["x", "w_raw"], ["h"]),
        node("MatMul", ["h", "w_typed"], ["y"]),
        node("Cast", ["w_half"], ["w_half_f32"], to=F32),
        node("MatMul", ["x", "w_half_f32"], ["z"]),
        node("Reshape", ["y", "shape"], ["y2"]),
        node("Not", ["mask"], ["m"]),
    ]
    return make(nodes, [value("x", F32, ["tokens", 16])],
                [value("y2", F32, None), value("z", F32, None),
                 value("m", BOOL, None)], [raw, typed, half, mask, shape])


@model("external")
def _(out):
    # Weights in an external file, written by onnx's own external-data
    # helper; the second tensor sits at a non-zero offset.
    w1 = const("w1", np.arange(32, dtype=np.float32).reshape(4, 8) / 4)
    w2 = const("w2", np.full((8, 16), 0.5, np.float32))
    nodes = [node("MatMul", ["x", "w1"], ["h"]),
             node("MatMul", ["h", "w2"], ["y"])]
    m = make(nodes, [value("x", F32, ["tokens", 4])], [value("y", F32, None)],
             [w1, w2])
    onnx.save_model(m, out, save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    onnx.checker.check_model(out)
    return None


@model("external_unaligned")
def _(out):
    # 100 floats at offset 2 of their file: not 4-byte aligned in the mapping.
    data = np.arange(100, dtype=np.float32)
    write_bytes(os.path.join(os.path.dirname(out), "weights.bin"),
                bytes(2) + data.tobytes())
    w = external("w", [100], "weights.bin", offset=2, length=400)
    n = node("Mul", ["x", "w"], ["y"])
    return make([n], [value("x", F32, [100])], [value("y", F32, [100])], [w],
                check=False)


@model("large_inline")
def _(out):
    # 80 MiB of inline raw_data: above protobuf's default 64 MiB limit.
    w = const("w", np.zeros((5 * 1024 * 1024, 4), np.float32))
    n = node("Gather", ["w", "ids"], ["y"], axis=0)
    return make([n], [value("ids", I64, ["tokens"])],
                [value("y", F32, ["tokens", 4])], [w])


@model("big_external")
def _(out):
    # Four 50 MiB weights in one sparse external file (zero pages cost no
    # disk): importing them must map, not read or copy, the file.
    rows, cols = 3584, 3584
    size = rows * cols * 4
    location = "big.bin"
    with open(os.path.join(os.path.dirname(out), location), "wb") as f:
        f.truncate(4 * size)
    inits = [external(f"w{i}", [rows, cols], location, offset=i * size,
                      length=size) for i in range(4)]
    nodes, prev = [], "x"
    for i in range(4):
        nodes.append(node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    return make(nodes, [value("x", F32, ["tokens", cols])],
                [value(prev, F32, None)], inits, check=False)


# ----------------------------------------------------------------------------
# Malformed models: each holds one defect.
# ----------------------------------------------------------------------------


def small_valid():
    return make([node("Relu", ["x"], ["y"], name="relu")],
                [value("x", F32, ["tokens", 4])],
                [value("y", F32, ["tokens", 4])])


@model("gather_indices_input")
def _(out):
    """Integer indices into a graph input, not a constant table: the plan
    records no value range for them."""
    return make([node("Gather", ["x", "ids"], ["y"], name="gather")],
                [value("x", F32, ["T", 4]), value("ids", I64, ["T"])],
                [value("y", F32, ["T", 4])])


@model("embedding_reshaped")
def _(out):
    """Token ids reshaped before they index a [10, 4] embedding table: the
    plan records [0, 10) as their value range."""
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    return make([node("Reshape", ["ids", "flat"], ["rows"], name="flatten"),
                 node("Gather", ["table", "rows"], ["y"], name="embed")],
                [value("ids", I64, ["b", "s"])], [value("y", F32, [None, 4])],
                [const("table", table), const("flat", np.array([-1]))])


@model("truncated")
def _(out):
    data = matmul_model(const("w", np.ones((4, 8), np.float32)))
    data = data.SerializeToString()
    write_bytes(out, data[: len(data) // 2])


@model("corrupt")
def _(out):
    rng = random.Random(1234)
    write_bytes(out, bytes(rng.randrange(256) for _ in range(4096)))


@model("external_missing")
def _(out):
    return matmul_model(external("w", [4, 8], "weights.bin"), check=False)


@model("external_dotdot")
def _(out):
    # The file exists one level up: only the path check stands in the way.
    write_bytes(os.path.join(os.path.dirname(out), "..", "outside.bin"),
                bytes(128))
    return matmul_model(external("w", [4, 8], "../outside.bin"), check=False)


@model("external_absolute")
def _(out):
    path = os.path.abspath(os.path.join(os.path.dirname(out), "weights.bin"))
    write_bytes(path, bytes(128))
    return matmul_model(external("w", [4, 8], path), check=False)


@model("external_symlink")
def _(out):
    # weights.bin is a symlink inside the directory to a file outside it.
    directory = os.path.dirname(os.path.abspath(out))
    target = os.path.join(directory, "..", "outside.bin")
    write_bytes(target, bytes(128))
    link = os.path.join(directory, "weights.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join("..", "outside.bin"), link)
    return matmul_model(external("w", [4, 8], "weights.bin"), check=False)


@model("external_past_end")
def _(out):
    write_bytes(os.path.join(os.path.dirname(out), "weights.bin"), bytes(160))
    return matmul_model(external("w", [4, 8], "weights.bin", offset=64,
                                 length=128), check=False)


@model("external_length")
def _(out):
    write_bytes(os.path.join(os.path.dirname(out), "weights.bin"), bytes(256))
    return matmul_model(external("w", [4, 8], "weights.bin", length=64),
                        check=False)


@model("raw_size")
def _(out):
    w = TensorProto(name="w", data_type=F32, dims=[4, 8], raw_data=bytes(12))
    return matmul_model(w, check=False)


@model("typed_size")
def _(out):
    w = helper.make_tensor("w", F32, [4, 8], [1.0] * 31)
    return matmul_model(w, check=False)


@model("dims_overflow")
def _(out):
    w = TensorProto(name="w", data_type=F32, dims=[2**40, 2**40])
    return matmul_model(w, check=False)


@model("negative_dim")
def _(out):
    w = TensorProto(name="w", data_type=F32, dims=[4, -8])
    return matmul_model(w, check=False)


@model("string_initializer")
def _(out):
    w = helper.make_tensor("w", TensorProto.STRING, [1], [b"x"])
    return matmul_model(w, check=False)


@model("unsupported_op")
def _(out):
    nodes = [node("Constant", [], ["w"], name="w",
                  value=numpy_helper.from_array(
                      np.ones((3, 3), np.float32))),
             node("Det", ["w"], ["y"], name="det")]
    return make(nodes, [], [value("y", F32, None)])


@model("gelu_17")
def _(out):
    # Gelu came with opset 20: at 17 it is not an op yet.
    n = node("Gelu", ["x"], ["y"], name="gelu")
    return make([n], [value("x", F32, ["tokens", 4])],
                [value("y", F32, ["tokens", 4])], opset=17, check=False)


@model("unsupported_domain")
def _(out):
    m = small_valid()
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    return m


def old_opset_ops(opset):
    """A router-like graph whose ops changed form before opset 13: Softmax
    over a 3-D input (opsets < 13 coerce it to 2-D at `axis`), attributes
    that became inputs (Unsqueeze/Squeeze/ReduceSum axes, Split sizes,
    TopK's k before 10, Slice's starts/ends before 10, Clip's bounds before
    11), all as that opset writes them."""
    nodes = [node("MatMul", ["x", "w"], ["logits"]),
             node("Reshape", ["logits", "shape3"], ["l3"]),
             # Softmax over the last two axes together (axis=1 of [T, 2, 4]).
             node("Softmax", ["l3"], ["p3"], axis=1),
             node("Reshape", ["p3", "shape2"], ["probs"])]
    inits = [const("w", np.random.default_rng(9).standard_normal(
                 (6, 8)).astype(np.float32)),
             const("shape3", np.array([-1, 2, 4], np.int64)),
             const("shape2", np.array([-1, 8], np.int64))]
    if opset < 10:
        nodes.append(node("TopK", ["probs"], ["top", "ids"], axis=1, k=2))
        nodes.append(node("Slice", ["probs"], ["head"], axes=[1],
                          starts=[1], ends=[5]))
    else:
        nodes.append(node("TopK", ["probs", "k"], ["top", "ids"], axis=1))
        inits.append(const("k", np.array([2], np.int64)))
        nodes.append(node("Slice", ["probs", "starts", "ends", "axes"],
                          ["head"]))
        inits += [const("starts", np.array([1], np.int64)),
                  const("ends", np.array([5], np.int64)),
                  const("axes", np.array([1], np.int64))]
    if opset < 11:
        nodes.append(node("Clip", ["head"], ["clipped"], min=0.05, max=0.5))
    else:
        nodes.append(node("Clip", ["head", "lo", "hi"], ["clipped"]))
        inits += [const("lo", np.array(0.05, np.float32)),
                  const("hi", np.array(0.5, np.float32))]
    nodes += [node("Unsqueeze", ["clipped"], ["u"], axes=[0]),
              node("ReduceSum", ["u"], ["r"], axes=[2], keepdims=0),
              node("Squeeze", ["r"], ["rowsum"], axes=[0]),
              node("Split", ["top"], ["first", "second"], axis=1,
                   split=[1, 1]),
              node("Sub", ["first", "second"], ["margin"]),
              node("Concat", ["margin", "top"], ["scores"], axis=1)]
    return make(nodes, [value("x", F32, ["tokens", 6])],
                [value("scores", F32, ["tokens", 3]),
                 value("ids", I64, ["tokens", 2]),
                 value("rowsum", F32, ["tokens"])], inits, opset=opset)


for _opset in (9, 11, 12):
    model(f"old_opset_{_opset}")(lambda out, o=_opset: old_opset_ops(o))


@model("old_opset_unconvertible")
def _(out):
    # An opset-11 Unsqueeze without its required axes: onnx's checker
    # refuses it before the converter sees it.
    m = make([node("Unsqueeze", ["x"], ["y"], axes=[0])],
             [value("x", F32, ["tokens", 4])],
             [value("y", F32, [1, "tokens", 4])], opset=11)
    del m.graph.node[0].attribute[:]
    return m


@model("opset_6")
def _(out):
    m = small_valid()
    m.opset_import[0].version = 6
    return m


@model("opset_12")
def _(out):
    m = small_valid()
    m.opset_import[0].version = 12
    return m


@model("opset_25")
def _(out):
    m = small_valid()
    m.opset_import[0].version = 25
    return m


@model("no_default_opset")
def _(out):
    m = small_valid()
    m.opset_import[0].domain = "com.microsoft"
    return m


@model("ir_version")
def _(out):
    m = small_valid()
    m.ir_version = 14
    return m


@model("cycle")
def _(out):
    # b = Neg(a), a = Abs(b): neither can be computed first.
    nodes = [node("Abs", ["b"], ["a"], name="abs"),
             node("Neg", ["a"], ["b"], name="neg"),
             node("Add", ["x", "b"], ["y"], name="add")]
    return make(nodes, [value("x", F32, [4])], [value("y", F32, [4])],
                check=False)


@model("undefined_input")
def _(out):
    m = small_valid()
    m.graph.node[0].input[0] = "nowhere"
    return m


@model("duplicate_output")
def _(out):
    m = small_valid()
    m.graph.node.append(node("Abs", ["x"], ["y"], name="abs"))
    return m


@model("input_without_shape")
def _(out):
    m = small_valid()
    m.graph.input[0].type.tensor_type.ClearField("shape")
    return m


@model("attribute_type")
def _(out):
    # Softmax's axis as a FLOAT instead of an INT.
    n = node("Softmax", ["x"], ["y"], name="softmax", axis=1.0)
    return make([n], [value("x", F32, ["tokens", 4])],
                [value("y", F32, None)], check=False)


@model("attribute_unknown")
def _(out):
    n = node("Softmax", ["x"], ["y"], name="softmax", temperature=2.0)
    return make([n], [value("x", F32, ["tokens", 4])],
                [value("y", F32, None)], check=False)


@model("graph_attribute")
def _(out):
    # A GRAPH attribute on an op that takes none.
    body = helper.make_graph([], "body", [], [])
    n = node("Relu", ["x"], ["y"], name="relu", body=body)
    return make([n], [value("x", F32, ["tokens", 4])],
                [value("y", F32, None)], check=False)


@model("shape_mismatch")
def _(out):
    # [T, 4] @ [5, 8]: the contraction dimensions disagree.
    n = node("MatMul", ["x", "w"], ["y"], name="mm")
    return make([n], [value("x", F32, ["tokens", 4])],
                [value("y", F32, None)],
                [const("w", np.ones((5, 8), np.float32))], check=False)


@model("input_overflow")
def _(out):
    m = small_valid()
    for dim in m.graph.input[0].type.tensor_type.shape.dim:
        dim.dim_value = 2**62
    return m


@model("result_overflow")
def _(out):
    # A [2^40, 2^40] ConstantOfShape: a type no buffer could be planned for.
    nodes = [node("ConstantOfShape", ["shape"], ["y"], name="zeros")]
    return make(nodes, [], [value("y", F32, None)],
                [const("shape", np.array([2**40, 2**40], np.int64))],
                check=False)


@model("output_type")
def _(out):
    m = small_valid()
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    return m


@model("constant_string")
def _(out):
    n = node("Constant", [], ["y"], name="c", value_string="hello")
    return make([n], [], [value("y", F32, None)], check=False)


# Near misses of node arity: each model holds one node with a required
# input left out (an empty name or too few inputs), too many inputs or an
# empty name among variadic ones; `moec` must refuse it naming the node and
# the input. onnx.helper makes them (only the checker would refuse them).
X4 = value("x", F32, ["tokens", 4])
ARITY_CASES = {
    # name: (op, inputs, attributes)
    "arity_gather_one_input": ("Gather", ["x"], {}),
    "arity_where_empty_condition": ("Where", ["", "x", "x"], {}),
    "arity_slice_no_ends": ("Slice", ["x", "starts"], {}),
    "arity_layernorm_empty_scale": ("LayerNormalization", ["x", ""], {}),
    "arity_topk_empty_k": ("TopK", ["x", ""], {}),
    "arity_unsqueeze_no_axes": ("Unsqueeze", ["x"], {}),
    "arity_expand_empty_shape": ("Expand", ["x", ""], {}),
    "arity_add_three_inputs": ("Add", ["x", "x", "x"], {}),
    "arity_concat_empty_input": ("Concat", ["x", "", "x"], {"axis": 0}),
    "arity_sum_no_inputs": ("Sum", [], {}),
    "arity_identity_no_input": ("Identity", [], {}),
    "arity_reducemean13_axes_input": ("ReduceMean", ["x", "starts"], {}),
}


def arity_case(op, inputs, attrs):
    opset = 13 if op == "ReduceMean" else 21
    return make([node(op, inputs, ["y"], name="n", **attrs)], [X4],
                [value("y", F32, None)],
                [const("starts", np.array([0], np.int64))], opset=opset,
                check=False)


for _name, _case in ARITY_CASES.items():
    model(_name)(lambda out, case=_case: arity_case(*case))


@model("optional_input_empty")
def _(out):
    # Clip with min left out by an empty name and max given: valid ONNX.
    nodes = [node("Clip", ["x", "", "hi"], ["y"], name="clip")]
    return make(nodes, [X4], [value("y", F32, ["tokens", 4])],
                [const("hi", np.array(0.5, np.float32))])


@model("constant_no_value")
def _(out):
    n = node("Constant", [], ["y"], name="c")
    return make([n], [], [value("y", F32, None)], check=False)


@model("constant_two_values")
def _(out):
    n = node("Constant", [], ["y"], name="c", value_int=1, value_ints=[1, 2])
    return make([n], [], [value("y", I64, None)], check=False)


@model("constant_other_attribute")
def _(out):
    n = node("Constant", [], ["y"], name="c", value_ints=[1], axis=[0])
    return make([n], [], [value("y", I64, None)], check=False)


@model("split_num_outputs_mismatch")
def _(out):
    n = node("Split", ["x"], ["a", "b"], name="split", axis=1,
             num_outputs=2**40)
    return make([n], [X4], [value("a", F32, None), value("b", F32, None)],
                check=False)


@model("split_huge_dynamic")
def _(out):
    # A `split` input of 2^20 sizes (a graph input, not a constant) would
    # make as many results.
    n = node("Split", ["x", "sizes"], ["a"], name="split", axis=0)
    return make([n], [X4, value("sizes", I64, [2**20])],
                [value("a", F32, None)], check=False)


def lp_normalization(opset):
    """LpNormalization (version 1 at opset 21, 22 at 22) over x [tokens, 3,
    8] masked so that some slices are all zeros (row 1 of the first token,
    column 5, and row 2 of every token: zero slices along each axis), at p 1
    and 2 along the last axis (the defaults too), axis 1 and axis 0."""
    mask = np.ones((1, 3, 8), np.float32)
    mask[0, 1, :2] = 0.0
    mask[0, :, 5] = 0.0
    mask[0, 2, :] = 0.0
    first = np.ones((1, 3, 8), np.float32)
    first[0, 1, :] = 0.0
    nodes = [node("Mul", ["x", "mask"], ["m0"]),
             # The first token also loses row 1 entirely.
             node("Slice", ["m0", "zero", "one", "zero"], ["head"]),
             node("Slice", ["m0", "one", "big", "zero"], ["tail"]),
             node("Mul", ["head", "first"], ["head0"]),
             node("Concat", ["head0", "tail"], ["m"], axis=0),
             node("LpNormalization", ["m"], ["defaults"]),
             node("LpNormalization", ["m"], ["p1_last"], p=1, axis=-1),
             node("LpNormalization", ["m"], ["p2_axis1"], p=2, axis=1),
             node("LpNormalization", ["m"], ["p1_axis0"], p=1, axis=0),
             node("LpNormalization", ["m"], ["p2_axis0"], axis=-3)]
    outs = ["defaults", "p1_last", "p2_axis1", "p1_axis0", "p2_axis0"]
    return make(nodes, [value("x", F32, ["tokens", 3, 8])],
                [value(o, F32, None) for o in outs],
                [const("mask", mask), const("first", first),
                 const("zero", np.array([0], np.int64)),
                 const("one", np.array([1], np.int64)),
                 const("big", np.array([1 << 30], np.int64))], opset=opset)


for _opset in (21, 22):
    model(f"lp_norm_{_opset}")(lambda out, v=_opset: lp_normalization(v))


@model("lp_norm_bad_p")
def _(out):
    return make([node("LpNormalization", ["x"], ["y"], name="lp", p=3)],
                [value("x", F32, [2, 8])], [value("y", F32, None)],
                check=False)


@model("lp_norm_bad_axis")
def _(out):
    return make([node("LpNormalization", ["x"], ["y"], name="lp", axis=2)],
                [value("x", F32, [2, 8])], [value("y", F32, None)],
                check=False)


def main(models=None, description=None):
    """The command line of this script, or of another generator of `models`
    (gen_onnx_if.py) described by `description`."""
    models = MODELS if models is None else models
    parser = argparse.ArgumentParser(
        description=description or __doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", help="model to build")
    parser.add_argument("out", nargs="?", help="where to write it")
    parser.add_argument("--list", action="store_true", help="list the models")
    args = parser.parse_args()
    if args.list:
        print("\n".join(sorted(models)))
        return 0
    if not args.name or not args.out:
        parser.error("NAME and OUT are required")
    if args.name not in models:
        parser.error(f"unknown model '{args.name}' (see --list)")
    directory = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(directory, exist_ok=True)
    m = models[args.name](args.out)
    if m is not None:
        write_bytes(args.out, m.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main())
