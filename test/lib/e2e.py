#!/usr/bin/env python3
"""End-to-end check of one ONNX model: moec compile -> moe-run vs onnxruntime.

For every token count, makes fresh random inputs (seeded by the token count and
--seed), runs the compiled plan with moe-run and the same ONNX file with
onnxruntime (CPU), and compares every output. Exits 1 with a report on the first
mismatch, 0 when all match.

Shapes: a graph input's dynamic dimensions take the token count, except that
when an input has two or more dynamic dimensions the first is the batch
(--batch, default 1). Integer inputs (token ids) are uniform in [0, --int-high).

Routing statistics (on by default, --no-check-stats turns them off): the
compile report (moec --report) lists the detected MoE layers with their expert
count, top_k and capacity; every run writes `moe-run --stats`, whose
"moe_layers" must list the same layers, one count per expert, and account for
every assignment: kept + dropped = routed tokens x top_k, with nothing dropped
unless the layer has a capacity (then kept <= routed tokens x top_k).

Expert parallelism (--devices N): the model is compiled with `--devices N`
(plus any --compile-arg, e.g. --micro-batches) and run on N devices, as N
threads of moe-run (`--devices N`) or, with --mpi, as N ranks of
`mpirun -np N moe-run`. The outputs must match onnxruntime as above, and the
per-device stats must account for every routed assignment: the rows the
devices' experts ran add up to routed tokens x top_k summed over the layers
(at most that with a capacity), and the layers merged over the devices pass
the single-device checks.

16-bit expert weights (--weight-dtype bf16|f16): the model is compiled with
`moec compile --weight-dtype`, which stores the expert networks' matrices
rounded to nearest even, and the compile report names the model initializers
they came from ("narrowed_initializers"). The onnxruntime reference is then a
copy of the model whose initializers of that list are rounded the same way
(kept float32): the plan computes in f32 from exactly those values, so the
usual tolerance applies, except that bf16 GEMM blocks on CPUs with
AVX512-BF16 round the activations to bf16 as well (kernels/expert_gemm.h):
tests of bf16 plans pass --rtol 1e-2. A narrowed matrix that is not such an
initializer (a folded constant) cannot be reproduced and is an error.

int8 expert weights (--weight-dtype int8): the plan stores the routed
experts' matrices quantized per output channel; the reference is the f32
model itself, so the comparison measures the quantization error and needs an
explicit, looser --rtol (the runtime's unit tests check the int8 kernels
exactly against the dequantized network).

Torch reference (--torch-reference FILE.npz, from examples/zoo/
export_zoo_v5.py): the file's saved inputs run as well, and every output must
match both onnxruntime (--rtol) and the torch module's saved output
(--torch-rtol, default 1e-4 as the zoo's own parity check), so a test
compares moec with torch without torch installed.

Tolerance: float32 outputs must satisfy max|moe-run - ort| <= rtol * max(1,
max|ort|) (default rtol 1e-5): a relative bound on the output's scale, since
elementwise relative error is meaningless near zero. Integer and bool outputs
must be equal.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

NUMPY_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_,
}


def static_size(dim):
    """The static size of an ONNX dimension: its dim_value, or the number an
    all-digit dim_param spells (transformers writes '32' for static sizes,
    and moec reads it so); None for a dynamic one."""
    if dim.HasField("dim_value"):
        return dim.dim_value
    if dim.dim_param.isdigit():
        return int(dim.dim_param)
    return None


def graph_inputs(model):
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def make_inputs(model, tokens, batch, int_high, rng):
    feeds = {}
    for value in graph_inputs(model):
        tensor = value.type.tensor_type
        dims = list(tensor.shape.dim)
        dynamic = [i for i, d in enumerate(dims) if static_size(d) is None]
        shape = []
        for i, d in enumerate(dims):
            if static_size(d) is not None:
                shape.append(static_size(d))
            elif len(dynamic) >= 2 and i == dynamic[0]:
                shape.append(batch)
            else:
                shape.append(tokens)
        dtype = NUMPY_TYPES.get(tensor.elem_type)
        if dtype is None:
            sys.exit(f"e2e: input {value.name}: unsupported element type "
                     f"{tensor.elem_type}")
        if dtype == np.float32:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
        elif dtype == np.bool_:
            feeds[value.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[value.name] = rng.integers(0, int_high, shape).astype(dtype)
    return feeds


def has_batch_dim(model):
    """Whether an input has a batch dimension (two or more dynamic dims; see
    make_inputs)."""
    for value in graph_inputs(model):
        dims = value.type.tensor_type.shape.dim
        if sum(static_size(d) is None for d in dims) >= 2:
            return True
    return False


def routed_tokens(model, tokens, batch):
    """Rows the routers see: the batch folds into the tokens when an input has
    a batch dimension."""
    return tokens * batch if has_batch_dim(model) else tokens


def split_rows(model, tokens, batch):
    """The size of the dimension a multi-device run splits over its devices
    (dim 0 of the inputs: the batch, else the tokens)."""
    return batch if has_batch_dim(model) else tokens


def padded_tokens(stats_path, routed, rows):
    """Tokens of the padding rows that devices without a share of the batch
    ran (moe-run --stats "padding_rows"): they are routed like real ones."""
    with open(stats_path) as f:
        padding = json.load(f).get("expert_parallel", {}).get("padding_rows", 0)
    return padding * (routed // rows) if rows else 0


def check_stats(report_layers, stats_path, routed):
    """Compares the "moe_layers" of moe-run --stats with the compile report;
    returns a list of failure messages."""
    with open(stats_path) as f:
        layers = json.load(f)["moe_layers"]
    if len(layers) != len(report_layers):
        return [f"moe-run --stats lists {len(layers)} MoE layer(s); the "
                f"compile report detected {len(report_layers)}"]
    failures = []
    for i, (got, want) in enumerate(zip(layers, report_layers)):
        where = f"layer {i} ({got['name']})"
        before = len(failures)
        counts = got["tokens_per_expert"]
        if len(counts) != want["experts"]:
            failures.append(f"{where}: {len(counts)} expert counts; the "
                            f"report has {want['experts']} experts")
            continue
        expected = got["runs"] * routed * want["top_k"]
        kept, dropped = sum(counts), got["dropped"]
        if got["runs"] < 1:
            failures.append(f"{where}: the layer never ran")
        if kept + dropped != expected:
            failures.append(f"{where}: kept {kept} + dropped {dropped} != "
                            f"{got['runs']} run(s) x {routed} tokens x top_k "
                            f"{want['top_k']} = {expected}")
        routed_here = got.get("routed_per_expert")
        if routed_here is not None and routed_here != counts:
            failures.append(f"{where}: the experts computed {counts} but the "
                            f"routers assigned {routed_here}")
        if want["capacity"] is None and dropped:
            failures.append(f"{where}: {dropped} assignment(s) dropped "
                            f"without a capacity")
        if len(failures) == before:
            print(f"ok stats {where}: kept {kept} + dropped {dropped} = "
                  f"{routed} tokens x top_k {want['top_k']}, imbalance "
                  f"{got['imbalance']}")
    return failures


def check_device_stats(report_layers, stats_path, routed):
    """Under expert parallelism every kept assignment runs on exactly one
    device's experts: the devices' expert rows add up to the routed
    assignments of all layers. Returns a list of failure messages."""
    with open(stats_path) as f:
        stats = json.load(f)
    devices = stats.get("devices")
    if not devices:
        return ["moe-run --stats has no per-device section"]
    rows = sum(d["expert_rows"] for d in devices)
    expected = stats["runs"] * routed * sum(l["top_k"] for l in report_layers)
    capacity = any(l["capacity"] is not None for l in report_layers)
    if rows > expected or (rows != expected and not capacity):
        return [f"the devices' experts ran {rows} rows; {stats['runs']} "
                f"run(s) x {routed} tokens x top_k over the layers = "
                f"{expected}"]
    print(f"ok stats devices: {len(devices)} devices ran {rows} expert rows "
          f"= {routed} tokens x top_k, per device "
          f"{[d['expert_rows'] for d in devices]}")
    return []


def round_bf16(values):
    """float32 values rounded to the nearest bfloat16 (ties to even; NaN stays
    NaN, infinities stay infinite), as float32."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    rounded = np.where(nan, (bits | 0x400000) & 0xFFFF0000, rounded)
    return rounded.astype(np.uint32).view(np.float32).reshape(values.shape)


def round_f16(values):
    """float32 values rounded to the nearest IEEE half (ties to even, overflow
    to infinity), as float32."""
    with np.errstate(over="ignore"):
        return values.astype(np.float16).astype(np.float32)


def rounded_model(model, names, dtype, path):
    """Saves a copy of `model` whose initializers `names` are rounded to
    `dtype` (bf16 or f16) and kept float32; returns the rounded count."""
    from onnx import numpy_helper
    wanted = set(names)
    rounding = round_bf16 if dtype == "bf16" else round_f16
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    done = set()
    for tensor in copy.graph.initializer:
        if tensor.name not in wanted:
            continue
        values = numpy_helper.to_array(tensor)
        if values.dtype != np.float32:
            sys.exit(f"e2e: narrowed initializer {tensor.name} is "
                     f"{values.dtype}, not float32")
        tensor.CopyFrom(numpy_helper.from_array(rounding(values), tensor.name))
        done.add(tensor.name)
    missing = wanted - done
    if missing:
        sys.exit(f"e2e: the report names initializers the model lacks: "
                 f"{sorted(missing)}")
    onnx.save(copy, path)
    return len(done)


def compare(label, name, got, want, rtol, source):
    """Prints one output's comparison with `source`; returns whether it
    matches (float: max abs error within rtol * max(1, max|want|); integer
    and bool: equal)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        print(f"MISMATCH {label} output {name}: got {got.dtype}"
              f"{list(got.shape)}, {source} {want.dtype}{list(want.shape)}")
        return False
    if want.dtype.kind == "f":
        error = float(np.max(np.abs(got.astype(np.float64) - want))) \
            if want.size else 0.0
        scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        ok = error <= rtol * scale
        vs = "" if source == "onnxruntime" else f" vs {source}"
        print(f"{'ok' if ok else 'MISMATCH'} {label} output {name}"
              f"{list(want.shape)}{vs}: max abs error {error:.3g} (scale "
              f"{scale:.3g}, limit {rtol * scale:.3g})")
        return ok
    ok = np.array_equal(got, want)
    vs = "" if source == "onnxruntime" else f" vs {source}"
    print(f"{'ok' if ok else 'MISMATCH'} {label} output {name}"
          f"{list(want.shape)}{vs}: exact")
    return ok


def torch_reference_cases(model, path, output_names):
    """The saved cases of a --torch-reference file: for each token count T it
    lists (`<input>_t<T>` for every graph input, `<output>_t<T>` for every
    graph output), made by the exporting script from the torch module."""
    saved = np.load(path)
    counts = sorted({int(key.rsplit("_t", 1)[1]) for key in saved.files
                     if "_t" in key and key.rsplit("_t", 1)[1].isdigit()})
    if not counts:
        sys.exit(f"e2e: {path}: no <name>_t<tokens> arrays")
    cases = []
    for tokens in counts:
        def take(name):
            key = f"{name}_t{tokens}"
            if key not in saved.files:
                sys.exit(f"e2e: {path}: no array {key}")
            return saved[key]
        feeds = {value.name: take(value.name) for value in graph_inputs(model)}
        outputs = [take(name) for name in output_names]
        cases.append((f"torch-tokens={tokens}", tokens, feeds, outputs))
    return cases


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"e2e: command failed ({result.returncode}): {' '.join(cmd)}\n"
                 f"{result.stdout}{result.stderr}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--moec", default="moec")
    parser.add_argument("--moe-run", dest="moe_run", default="moe-run")
    parser.add_argument("--tokens", default="1,7,32",
                        help="comma-separated token counts")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--int-high", type=int, default=16)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir")
    parser.add_argument("--devices", type=int, default=1,
                        help="compile and run for N devices (expert "
                        "parallelism)")
    parser.add_argument("--mpi", action="store_true",
                        help="with --devices: run as N MPI ranks")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--compile-arg", dest="compile_args", action="append",
                        default=[], help="extra moec compile argument "
                        "(repeatable), e.g. --compile-arg=--micro-batches=2")
    parser.add_argument("--weight-dtype", choices=["f32", "bf16", "f16", "int8"],
                        default="f32", help="store the expert matrices so "
                        "(moec compile --weight-dtype) and compare with the "
                        "model whose expert weights are rounded alike")
    parser.add_argument("--torch-reference", dest="torch_reference",
                        help="an .npz of saved inputs and torch outputs "
                        "(<name>_t<tokens>): run those too and compare with "
                        "torch as well as onnxruntime")
    parser.add_argument("--torch-rtol", dest="torch_rtol", type=float,
                        default=1e-4, help="tolerance against torch (an "
                        "other framework's reduction order; as the zoo's "
                        "parity check)")
    parser.add_argument("--reference", help="run this model in onnxruntime "
                        "instead of MODEL (same inputs and outputs: MODEL "
                        "with its quantized weights dequantized, say)")
    parser.add_argument("--no-check-stats", dest="check_stats",
                        action="store_false",
                        help="skip the routing statistics check")
    args = parser.parse_args()

    model = onnx.load(args.model)
    workdir = args.workdir or tempfile.mkdtemp(prefix="moec-e2e-")
    os.makedirs(workdir, exist_ok=True)
    plan = os.path.join(workdir, "plan.bin")
    report = os.path.join(workdir, "report.json")
    compile_cmd = [args.moec, "compile", args.model, "-o", plan,
                   f"--max-tokens={args.max_tokens}", "--report", report]
    if args.devices > 1:
        compile_cmd.append(f"--devices={args.devices}")
    if args.weight_dtype != "f32":
        compile_cmd.append(f"--weight-dtype={args.weight_dtype}")
    run(compile_cmd + args.compile_args)
    with open(report) as f:
        report_json = json.load(f)
    report_layers = report_json["moe_layers"]

    reference = args.reference or args.model
    if args.reference and args.weight_dtype != "f32":
        sys.exit("e2e: --reference and --weight-dtype both pick the reference")
    if args.weight_dtype == "int8":
        if args.rtol < 1e-3 or args.torch_reference:
            sys.exit("e2e: --weight-dtype int8 compares with the f32 model: "
                     "pass --rtol (quantization error, about 1e-2) and no "
                     "--torch-reference")
        print("ok weights: int8 expert matrices, compared with the f32 model")
    elif args.weight_dtype != "f32":
        names = report_json.get("narrowed_initializers")
        unnamed = report_json.get("narrowed_unnamed_constants", 0)
        if not names or unnamed:
            sys.exit(f"e2e: the compile report names {len(names or [])} "
                     f"narrowed initializer(s) and {unnamed} narrowed "
                     f"constant(s) that are none: no rounded reference")
        reference = os.path.join(workdir, f"reference_{args.weight_dtype}.onnx")
        count = rounded_model(model, names, args.weight_dtype, reference)
        print(f"ok weights: {count} expert weight initializer(s) rounded to "
              f"{args.weight_dtype} for the reference")

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(reference, options,
                                   providers=["CPUExecutionProvider"])
    output_names = [o.name for o in session.get_outputs()]

    cases = []
    for tokens in [int(t) for t in args.tokens.split(",")]:
        rng = np.random.default_rng([args.seed, tokens])
        cases.append((f"tokens={tokens}", tokens,
                      make_inputs(model, tokens, args.batch, args.int_high,
                                  rng), None))
    if args.torch_reference:
        cases += torch_reference_cases(model, args.torch_reference,
                                       output_names)

    failures = 0
    for label, tokens, feeds, torch_outputs in cases:
        expected = session.run(output_names, feeds)

        step = os.path.join(workdir, label.replace("tokens=", "t"))
        os.makedirs(step, exist_ok=True)
        stats = os.path.join(step, "stats.json")
        cmd = [args.moe_run, plan, "--output-dir", step,
               f"--threads={args.threads}", "--stats", stats]
        if args.mpi:
            # Open MPI refuses root without both variables; --oversubscribe
            # lets N ranks share this machine's cores.
            os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            cmd = [args.mpirun, "-np", str(args.devices), "--oversubscribe",
                   "--bind-to", "none"] + cmd
        elif args.devices > 1:
            cmd.append(f"--devices={args.devices}")
        for name, value in feeds.items():
            path = os.path.join(step, f"in_{len(cmd)}.npy")
            np.save(path, value)
            cmd += ["--input", f"{name}={path}"]
        run(cmd)
        if args.check_stats:
            # Multi-device runs merge their layers over the devices, which
            # must add up like a single device's.
            checks = [check_device_stats, check_stats] if args.devices > 1 \
                else [check_stats]
            routed = routed_tokens(model, tokens, args.batch)
            if args.devices > 1:
                routed += padded_tokens(
                    stats, routed, split_rows(model, tokens, args.batch))
            for check in checks:
                for message in check(report_layers, stats, routed):
                    print(f"MISMATCH {label} stats {message}")
                    failures += 1

        for index, (name, want) in enumerate(zip(output_names, expected)):
            safe = "".join(c if c.isalnum() or c in "._-" else "_"
                           for c in name)
            got = np.load(os.path.join(step, safe + ".npy"))
            failures += not compare(label, name, got, want, args.rtol,
                                    "onnxruntime")
            if torch_outputs is not None:
                failures += not compare(label, name, got,
                                        torch_outputs[index], args.torch_rtol,
                                        "torch")
    if failures:
        sys.exit(f"e2e: {failures} output(s) or statistics differ from "
                 f"onnxruntime and the compile report")
    against = f" on {os.path.basename(args.reference)}" if args.reference \
        else ""
    print(f"e2e: {os.path.basename(args.model)} matches onnxruntime{against}")


if __name__ == "__main__":
    main()
