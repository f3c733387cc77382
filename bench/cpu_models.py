#!/usr/bin/env python3
"""Builds the models of the CPU speed benchmark (issue 13, bench/cpu_speed.py)
with onnx.helper and numpy, float32, weights in ONNX external data.

    .venv/bin/python bench/cpu_models.py --work DIR [--shape mixtral]
        [--hidden H --ffn F] [--check]

Per layer shape (SHAPES: `mixtral` E=8 top-2 H=2048 F=5632, `qwen3` E=128
top-8 H=2048 F=768), on the same random weights:

  <shape>_contrib.onnx  router MatMul -> onnxruntime's com.microsoft.MoE
                        (opset 1 of that domain, as onnxruntime 1.23.2's CPU
                        kernel accepts it: fc1 [E, 2F, H] with w1 and w3 rows
                        interleaved, swiglu_fusion=1, fc2 [E, H, F],
                        activation_type swiglu, normalize_routing_weights=1)
  <shape>_loop.onnx     the per-expert loop TorchScript writes for
                        transformers' MixtralSparseMoeBlock
                        (examples/zoo/mixtral_block.onnx): router MatMul ->
                        Softmax -> TopK -> ReduceSum/Div, OneHot -> Transpose
                        into the [E, k, T] expert mask; per expert Gather(mask,
                        e) -> Cast -> NonZero -> Transpose -> Split -> Squeeze
                        -> Gather(tokens) -> MatMul w1, w3 ([H, F] B operands)
                        -> x*Sigmoid(x) * up -> MatMul w2 -> Mul(weight
                        gathered at j + t*k of the flattened weights)
                        -> ScatterElements into zeros -> Add to the
                        accumulator
  <shape>_whole.onnx    a 2-layer causal LM of that shape: Gather embedding
                        (vocab 1024), per layer RMSNorm -> causal
                        softmax(QK^T/sqrt(d))V attention without RoPE (16
                        heads, 4 KV heads repeated by Unsqueeze/Expand/
                        Reshape, HF's repeat_kv) -> residual -> RMSNorm -> the
                        loop-form MoE layer -> residual; final RMSNorm, LM head

All take [tokens, H] (input_ids [tokens] for the whole model). Weights are
written straight into `<model>.onnx.data` as they are drawn (expert by
expert, so a 2.4 GB layer never sits in memory twice); each expert's
matrices come from its own seed, so the two forms hold the same numbers.

--check builds the models at the given size into --work, runs each in
onnxruntime, checks that the fused op and the loop form agree (1e-4 relative:
the same weights), and that `moec compile --report` finds one MoE layer in
each layer model and two in the whole model, whose moe-run output must
match onnxruntime's. It exits 1 naming the first failure.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
from gen_contrib_moe import IR_VERSION, OPSET  # noqa: E402

SHAPES = {
    "mixtral": dict(experts=8, top_k=2, hidden=2048, ffn=5632),
    "qwen3": dict(experts=128, top_k=8, hidden=2048, ffn=768),
}
WHOLE = dict(vocab=1024, layers=2, heads=16, kv_heads=4)
FORMS = ("contrib", "loop", "whole")
# Every external tensor starts at an offset aligned to this (the page size),
# so that a reader may map it.
ALIGN = 4096


class Graph:
    """Nodes and initializers of one graph under construction; initializers
    go into one external data file as they are added."""

    def __init__(self, data_path):
        self.nodes, self.inits = [], []
        self.data_path = data_path
        self.data = open(data_path, "wb")
        self.count = 0

    def op(self, kind, inputs, outputs=1, domain=None, **attrs):
        """Appends a node; returns its output name (or names, outputs > 1)."""
        self.count += 1
        names = [f"{kind.lower()}_{self.count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(kind, inputs, names,
                                           name=f"{kind}_{self.count}",
                                           domain=domain, **attrs))
        return names[0] if outputs == 1 else names

    def const(self, value, dtype=np.int64):
        """A small constant initializer, stored in the model."""
        self.count += 1
        name = f"const_{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype),
                                                  name))
        return name

    def weight(self, name, shape, parts):
        """A float32 initializer of `shape` whose data is the concatenation of
        the arrays `parts` yields, written to the external data file."""
        offset = self.data.tell()
        if offset % ALIGN:
            self.data.write(bytes(ALIGN - offset % ALIGN))
            offset = self.data.tell()
        for part in parts:
            self.data.write(np.ascontiguousarray(part, np.float32).tobytes())
        length = self.data.tell() - offset
        if length != 4 * int(np.prod(shape)):
            raise ValueError(f"{name}: {length} bytes for shape {shape}")
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT,
                             dims=shape)
        for key, value in (("location", os.path.basename(self.data_path)),
                           ("offset", offset), ("length", length)):
            tensor.external_data.add(key=key, value=str(value))
        tensor.data_location = TensorProto.EXTERNAL
        self.inits.append(tensor)
        return name

    def save(self, path, name, inputs, outputs):
        self.data.close()
        graph = helper.make_graph(self.nodes, name, inputs, outputs,
                                  self.inits)
        model = helper.make_model(
            graph, ir_version=IR_VERSION,
            opset_imports=[helper.make_opsetid("", OPSET),
                           helper.make_opsetid("com.microsoft", 1)],
            producer_name="moec bench/cpu_models.py")
        onnx.save(model, path)
        onnx.checker.check_model(path)


def rng_for(seed, *where):
    return np.random.default_rng([seed, *where])


def dense(seed, where, rows, cols):
    """A [rows, cols] matrix with N(0, 1/rows) entries (`rows` is the input
    size of x @ W): unit-scale inputs give unit-scale outputs."""
    w = rng_for(seed, *where).standard_normal((rows, cols), dtype=np.float32)
    return w * np.float32(1 / np.sqrt(rows))


def expert(seed, layer, e, hidden, ffn):
    """Expert e of `layer` in nn.Linear's [out, in] layout: w1, w3 [F, H]
    (gate, up) and w2 [H, F]."""
    rng = rng_for(seed, layer, 1000 + e)
    w1 = rng.standard_normal((ffn, hidden), dtype=np.float32)
    w3 = rng.standard_normal((ffn, hidden), dtype=np.float32)
    w2 = rng.standard_normal((hidden, ffn), dtype=np.float32)
    w1 *= np.float32(1 / np.sqrt(hidden))
    w3 *= np.float32(1 / np.sqrt(hidden))
    w2 *= np.float32(1 / np.sqrt(ffn))
    return w1, w3, w2


def router(g, x, cfg, seed, layer):
    """logits = x @ Wr, Wr [H, E]."""
    return g.op("MatMul", [x, g.weight(
        f"layer{layer}.router", [cfg["hidden"], cfg["experts"]],
        [dense(seed, (layer, 0), cfg["hidden"], cfg["experts"])])])


def contrib_moe(g, x, cfg, seed, layer):
    """Router MatMul -> com.microsoft.MoE on `x` [T, H]."""
    E, F, H = cfg["experts"], cfg["ffn"], cfg["hidden"]

    def fc1_parts():
        for e in range(E):
            w1, w3, _ = expert(seed, layer, e, H, F)
            fc1 = np.empty((2 * F, H), np.float32)
            fc1[0::2], fc1[1::2] = w1, w3
            yield fc1

    fc1 = g.weight(f"layer{layer}.fc1", [E, 2 * F, H], fc1_parts())
    fc2 = g.weight(f"layer{layer}.fc2", [E, H, F],
                   (expert(seed, layer, e, H, F)[2] for e in range(E)))
    return g.op("MoE", [x, router(g, x, cfg, seed, layer), fc1, "", fc2],
                domain="com.microsoft", k=cfg["top_k"],
                normalize_routing_weights=1, activation_type="swiglu",
                swiglu_fusion=1, activation_alpha=1.0, activation_beta=0.0)


def loop_moe(g, x, cfg, seed, layer):
    """The TorchScript per-expert loop (module docstring) on `x` [T, H]."""
    E, k, F, H = cfg["experts"], cfg["top_k"], cfg["ffn"], cfg["hidden"]
    probs = g.op("Softmax", [router(g, x, cfg, seed, layer)], axis=1)
    scores, indices = g.op("TopK", [probs, g.const([k])], outputs=2, axis=-1,
                           largest=1, sorted=1)
    total = g.op("ReduceSum", [scores, g.const([-1])], keepdims=1)
    weights = g.op("Div", [scores, total])
    # [T, k, E] one-hot -> [E, k, T]: mask[e, j, t] = (indices[t, j] == e).
    one_hot = g.op("OneHot", [indices, g.const(E), g.const([0, 1])], axis=-1)
    mask = g.op("Transpose", [one_hot], perm=[2, 1, 0])
    # weights[t, j] as a [T * k, 1] column, read at j + t * k.
    flat = g.op("Flatten", [g.op("Unsqueeze", [weights, g.const([2])])],
                axis=2)
    acc = g.op("ConstantOfShape", [g.op("Shape", [x])],
               value=numpy_helper.from_array(np.zeros(1, np.float32)))
    for e in range(E):
        w1, w3, w2 = expert(seed, layer, e, H, F)
        name = f"layer{layer}.experts.{e}"
        routed = g.op("Cast", [g.op("Gather", [mask, g.const(e)], axis=0)],
                      to=TensorProto.BOOL)
        pairs = g.op("Transpose", [g.op("NonZero", [routed])], perm=[1, 0])
        slot, token = (g.op("Squeeze", [half, g.const([1])]) for half in
                       g.op("Split", [pairs, g.const([1, 1])], outputs=2,
                            axis=1))
        rows = g.op("Gather", [x, token], axis=0)
        gate = g.op("MatMul", [rows, g.weight(name + ".w1", [H, F], [w1.T])])
        up = g.op("MatMul", [rows, g.weight(name + ".w3", [H, F], [w3.T])])
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
        out = g.op("MatMul", [g.op("Mul", [act, up]),
                              g.weight(name + ".w2", [F, H], [w2.T])])
        at = g.op("Add", [slot, g.op("Mul", [token, g.const(k)])])
        scaled = g.op("Mul", [out, g.op("Gather", [flat, at], axis=0)])
        index = g.op("Expand", [g.op("Unsqueeze", [token, g.const([1])]),
                                g.op("Shape", [scaled])])
        zeros = g.op("ConstantOfShape", [g.op("Shape", [acc])],
                     value=numpy_helper.from_array(np.zeros(1, np.float32)))
        acc = g.op("Add", [acc, g.op("ScatterElements",
                                     [zeros, index, scaled], axis=0)])
    return acc


def rms_norm(g, x, name, hidden):
    """x / sqrt(mean(x^2) + eps) * w as transformers' MixtralRMSNorm
    exports it (Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul)."""
    mean = g.op("ReduceMean", [g.op("Pow", [x, g.const(2.0, np.float32)])],
                axes=[-1], keepdims=1)
    root = g.op("Sqrt", [g.op("Add", [mean, g.const(1e-5, np.float32)])])
    normed = g.op("Mul", [x, g.op("Reciprocal", [root])])
    return g.op("Mul", [normed, g.weight(name, [hidden],
                                         [np.ones(hidden, np.float32)])])


def attention(g, x, future, cfg, seed, layer):
    """Causal multi-head attention without RoPE on `x` [T, H]; KV heads are
    repeated to the query heads as transformers' repeat_kv exports it."""
    H, heads, kv = cfg["hidden"], WHOLE["heads"], WHOLE["kv_heads"]
    d = H // heads

    def project(tag, cols, index):
        w = g.weight(f"layer{layer}.{tag}", [H, cols],
                     [dense(seed, (layer, index), H, cols)])
        return g.op("MatMul", [x, w])

    def kv_heads(value, perm):
        """[T, kv * d] -> [heads, ...] by perm, each KV head repeated."""
        split = g.op("Reshape", [value, g.const([-1, kv, d])])
        per_head = g.op("Transpose", [split], perm=perm)
        repeated = g.op("Expand", [g.op("Unsqueeze", [per_head,
                                                     g.const([1])]),
                                   g.const([1, heads // kv, 1, 1])])
        tail = [d, -1] if perm == [1, 2, 0] else [-1, d]
        return g.op("Reshape", [repeated, g.const([heads] + tail)])

    q = g.op("Transpose", [g.op("Reshape", [project("wq", H, 1),
                                            g.const([-1, heads, d])])],
             perm=[1, 0, 2])
    k_t = kv_heads(project("wk", kv * d, 2), [1, 2, 0])  # [heads, d, T]
    v = kv_heads(project("wv", kv * d, 3), [1, 0, 2])  # [heads, T, d]
    scores = g.op("Mul", [g.op("MatMul", [q, k_t]),
                          g.const(1 / np.sqrt(d), np.float32)])
    masked = g.op("Where", [future, g.const(-1e9, np.float32), scores])
    context = g.op("MatMul", [g.op("Softmax", [masked], axis=-1), v])
    merged = g.op("Reshape", [g.op("Transpose", [context], perm=[1, 0, 2]),
                              g.const([-1, H])])
    return g.op("MatMul", [merged, g.weight(
        f"layer{layer}.wo", [H, H], [dense(seed, (layer, 4), H, H)])])


def whole_model(g, ids, cfg, seed):
    """The 2-layer causal LM (module docstring) on `ids` [T]."""
    H, vocab = cfg["hidden"], WHOLE["vocab"]
    embedding = rng_for(seed, 99, 0).standard_normal((vocab, H),
                                                     dtype=np.float32)
    x = g.op("Gather", [g.weight("embed", [vocab, H], [embedding]), ids],
             axis=0)
    # future[i, j] = j > i: key j is after query i.
    length = g.op("Gather", [g.op("Shape", [ids]), g.const(0)], axis=0)
    positions = g.op("Range", [g.const(0), length, g.const(1)])
    future = g.op("Greater", [g.op("Unsqueeze", [positions, g.const([0])]),
                              g.op("Unsqueeze", [positions, g.const([1])])])
    for layer in range(WHOLE["layers"]):
        a = g.op("Add", [x, attention(
            g, rms_norm(g, x, f"layer{layer}.attn_norm", H), future, cfg,
            seed, layer)])
        x = g.op("Add", [a, loop_moe(
            g, rms_norm(g, a, f"layer{layer}.moe_norm", H), cfg, seed,
            layer)])
    head = g.weight("lm_head", [H, vocab], [dense(seed, (99, 1), H, vocab)])
    return g.op("MatMul", [rms_norm(g, x, "norm", H), head])


def build(form, cfg, path, seed=0):
    """Writes model `form` (FORMS) of layer shape `cfg` to `path` and its
    weights to `path`.data."""
    g = Graph(path + ".data")
    H = cfg["hidden"]
    if form == "whole":
        inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                ["tokens"])]
        out = whole_model(g, "input_ids", cfg, seed)
        width = WHOLE["vocab"]
    else:
        inputs = [helper.make_tensor_value_info(
            "hidden_states", TensorProto.FLOAT, ["tokens", H])]
        moe = contrib_moe if form == "contrib" else loop_moe
        out = moe(g, "hidden_states", cfg, seed, 0)
        width = H
    g.nodes.append(helper.make_node("Identity", [out], ["output"],
                                    name="output"))
    g.save(path, f"cpu_speed_{form}", inputs, [helper.make_tensor_value_info(
        "output", TensorProto.FLOAT, ["tokens", width])])
    return path


def model_path(work, shape, form, cfg):
    """Where `form` of `shape` at `cfg`'s sizes lives in `work`: the sizes
    are in the name, so a smaller run never reuses a larger one's file."""
    return os.path.join(
        work, f"{shape}_e{cfg['experts']}k{cfg['top_k']}_h{cfg['hidden']}"
        f"_f{cfg['ffn']}_{form}.onnx")


def ensure(work, shape, form, cfg, regenerate=False):
    """The path of `form`, built first when missing (or `regenerate`)."""
    path = model_path(work, shape, form, cfg)
    if regenerate or not (os.path.exists(path) and
                          os.path.exists(path + ".data")):
        os.makedirs(work, exist_ok=True)
        build(form, cfg, path)
    return path


def shape_config(shape, hidden=None, ffn=None):
    cfg = dict(SHAPES[shape])
    if hidden:
        cfg["hidden"] = hidden
    if ffn:
        cfg["ffn"] = ffn
    if cfg["hidden"] % WHOLE["heads"]:
        raise ValueError(f"hidden {cfg['hidden']} is not a multiple of "
                         f"{WHOLE['heads']} heads")
    return cfg


def check(work, shapes, forms, hidden, ffn, moec, moe_run):
    """The --check of the module docstring; returns the failures."""
    import onnxruntime as ort

    from compare_ort import save_inputs
    from moe_layer import compile_plan, relative_error

    def compare(what, got, want, tolerance=1e-4):
        error = relative_error(got, want)
        print(f"{what}: max relative error {error:.1e}")
        return [f"{what}: error {error:.1e} > {tolerance}"] if \
            error > tolerance else []

    failures = []
    for shape in shapes:
        cfg = shape_config(shape, hidden, ffn)
        outputs = {}
        for form in forms:
            path = ensure(work, shape, form, cfg, regenerate=True)
            session = ort.InferenceSession(path,
                                           providers=["CPUExecutionProvider"])
            rng = np.random.default_rng(7)
            feeds = ({"input_ids": rng.integers(0, WHOLE["vocab"], 13)}
                     if form == "whole" else
                     {"hidden_states": rng.standard_normal(
                         (13, cfg["hidden"])).astype(np.float32)})
            (outputs[form],) = session.run(None, feeds)
            plan = path[:-len(".onnx")] + ".bin"
            want = WHOLE["layers"] if form == "whole" else 1
            try:
                found = len(compile_plan(moec, path, plan, 16))
            except subprocess.CalledProcessError as error:
                failures.append(f"{path}: moec failed: {error.stderr}")
                continue
            print(f"{os.path.basename(path)}: onnxruntime ran, moec found "
                  f"{found} MoE layer(s)")
            if found != want:
                failures.append(f"{path}: moec found {found} MoE layers, "
                                f"not {want}")
            if form == "whole":
                subprocess.run([moe_run, plan, "--output-dir", work,
                                *save_inputs(feeds, work, shape)],
                               check=True, capture_output=True)
                got = np.load(os.path.join(work, "output.npy"))
                failures += compare(f"{path}: moe-run vs onnxruntime", got,
                                    outputs[form])
        if "loop" in outputs and "contrib" in outputs:
            failures += compare(f"{shape}: the loop form vs the fused op",
                                outputs["loop"], outputs["contrib"])
    return failures


def docstring_parser(doc):
    """An argument parser whose --help is the module docstring `doc`."""
    return argparse.ArgumentParser(
        description=doc.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(doc.splitlines()[2:]))


def main():
    parser = docstring_parser(__doc__)
    parser.add_argument("--work", help="folder of the models (default: a "
                        "temporary one with --check, else bench/models)")
    parser.add_argument("--shape", default=",".join(SHAPES),
                        help="comma-separated layer shapes: "
                        + ", ".join(SHAPES))
    parser.add_argument("--hidden", type=int, help="override H")
    parser.add_argument("--ffn", type=int, help="override F")
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--moec", default="moec")
    parser.add_argument("--moe-run", default="moe-run")
    args = parser.parse_args()
    shapes = args.shape.split(",")
    forms = args.forms.split(",")
    for form in forms:
        if form not in FORMS:
            parser.error(f"--forms: unknown form {form!r}")
    for shape in shapes:
        if shape not in SHAPES:
            parser.error(f"--shape: unknown shape {shape!r}")
    if args.check:
        with tempfile.TemporaryDirectory() as scratch:
            failures = check(args.work or scratch, shapes, forms, args.hidden,
                             args.ffn, args.moec, args.moe_run)
        for failure in failures:
            print(f"FAIL {failure}")
        return 1 if failures else 0
    work = args.work or os.path.join(ROOT, "bench", "models")
    for shape in shapes:
        cfg = shape_config(shape, args.hidden, args.ffn)
        for form in forms:
            print(ensure(work, shape, form, cfg, regenerate=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
