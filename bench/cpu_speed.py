#!/usr/bin/env python3
"""CPU speed at real layer sizes (issue 13): moe-run against onnxruntime.

    .venv/bin/python bench/cpu_speed.py --tokens 1,16,256 --threads 2 \\
        [--shapes mixtral,qwen3] [--whole mixtral] [--dtypes f32,bf16,int8] \\
        [--build DIR] [--moe-run [LABEL=]PATH ...] [--work DIR]

Builds (once, into --work; bench/cpu_models.py says how) a Mixtral-shaped
MoE layer (E=8, top-2, H=2048, F=5632), a Qwen3-30B-A3B-shaped one (E=128,
top-8, H=2048, F=768), each as onnxruntime's fused com.microsoft.MoE and as
TorchScript's per-expert loop on the same weights, and a whole 2-layer
model of the Mixtral shape. For each layer, expert weight dtype (`moec
compile --weight-dtype`; a dtype moec rejects is skipped with its reason),
moe-run binary and token count it prints a row:

  model        layer shape (the whole model: `<shape>-lm`)
  layers       MoE layers `moec compile --report` found in the plan's model
  moe-run ms   median of `moe-run PLAN --bench N --threads T`, the plan
               compiled from the fused-op model (the whole model: its
               loop-form file), inputs from .npy files (--input)
  op ms        onnxruntime's fused com.microsoft.MoE (median, same threads)
  loop ms      onnxruntime on the loop-form export of the same weights
  x op, x loop op ms / moe-run ms and loop ms / moe-run ms: > 1 means
               moe-run is faster
  x f32        the same binary's f32 plan's time / this plan's time (the
               speed-up of 16- and 8-bit expert weights)
  active MB    bytes a run must read: every weight outside the experts, plus
               each expert that received a token once, at the plan's expert
               dtype (f32 4, bf16 2, int8 1 byte an element; int8's fp32
               scales, under 0.2% of them, are not counted)
  bw %         active bytes / moe-run time over the read bandwidth measured
               at the start (the figure of merit at 1 token)
  gemm %       FLOPs done (router and other static MatMuls, plus
               2 x rows x weights of every expert network run) / moe-run
               time, over the SGEMM rate measured at the start (the figure
               of merit at 256 tokens)
  roof %       the roofline time of the run, max(active bytes / read
               bandwidth, FLOPs / SGEMM rate), over moe-run time: how close
               the run is to what the measured machine allows at this shape
  gemm cap %   the highest gemm % the shape allows: FLOPs / SGEMM rate over
               that roofline time (below 100 when reading the active bytes
               takes longer than their FLOPs: few rows per expert)
  shape %      the time oneDNN takes for this run's expert GEMMs at their
               routed shapes, through what moe-run's f32 blocks call on
               this CPU (its brgemm f32 matmul where oneDNN picks one,
               else dnnl_sgemm; its own OpenMP threads, OMP_NUM_THREADS =
               --threads), one call per projection and expert with rows
               (x [rows, H] @ W1^T, W1 [gate+up, H], then [rows, F] @
               W2^T, W2 [H, F], f32, distinct weights per expert, best of
               3) over moe-run time: the library's rate at the routed
               shapes, which small row counts per expert keep below the
               2048^3 rate (f32 layer rows only; numpy's BLAS when libdnnl
               cannot be loaded)
  max err      max |moe-run - ref| / max(1, max |ref|): ref is onnxruntime's
               fused op (the whole model: onnxruntime on it) for f32, the
               same binary's f32 plan for other dtypes

The read bandwidth is a numpy maximum over a 1 GiB array on --threads
threads (numpy's float32 sum is compute-bound), the SGEMM rate numpy's BLAS
on a 2048^3 float32 product with its thread count set to --threads; the
header names the core the BLAS dispatched for, which may differ from what
moe-run and onnxruntime use. Both are measured at the start, before each
model and at the end, and the best of them is the roofline: other work on
a shared machine only ever lowers a measurement.
Rows are printed as they are measured (against the rooflines so far) and
again as one table at the end. This is a benchmark, never a test:
bench/README.md has a measured table.
"""

import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_models  # noqa: E402
from compare_ort import (add_common_arguments, make_inputs,  # noqa: E402
                         measure_bandwidth, measure_gemm, ort_session,
                         static_flops, time_moe_run, time_ort, tools,
                         weight_bytes)
from moe_layer import (compile_plan, expert_weights,  # noqa: E402
                       relative_error, routed_work)

# Bytes an expert weight element takes in a plan of each --weight-dtype.
ITEM_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "int8": 1}


def numpy_blas(threads):
    """Sets the thread count of numpy's bundled OpenBLAS; returns a line
    naming it and the core it detected (None when numpy has another BLAS:
    its thread count then stays its own)."""
    libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(
        np.__file__)), "numpy.libs", "libscipy_openblas*.so"))
    try:
        blas = ctypes.CDLL(libs[0])
        blas.scipy_openblas_set_num_threads64_(threads)
        for name in ("scipy_openblas_get_config64_",
                     "scipy_openblas_get_corename64_"):
            getattr(blas, name).restype = ctypes.c_char_p
        return (f"{blas.scipy_openblas_get_config64_().decode()}, core "
                f"{blas.scipy_openblas_get_corename64_().decode()}")
    except (IndexError, OSError, AttributeError):
        return None


def cpu_line():
    """The CPU model and its vector extensions that matter here."""
    model, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    wanted = ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni",
              "avx_vnni", "amx_bf16", "amx_int8"]
    return f"{model} ({' '.join(f for f in wanted if f in flags)})"


def runners(args):
    """(label, moe-run path) of --build's moe-run and each --moe-run."""
    result = [("build", tools(args.build)[1])]
    for entry in args.moe_run:
        label, sep, path = entry.partition("=")
        if not sep:
            # .../<worktree>/build/bin/moe-run -> <worktree>
            path = entry
            label = os.path.basename(os.path.dirname(os.path.dirname(
                os.path.dirname(os.path.abspath(path))))) or path
        result.append((label, path))
    return result


def time_onnxruntime(path, feeds, threads, runs):
    """{tokens: (median seconds, output)} of onnxruntime on `path`; the
    session is closed before returning (the weights are gigabytes)."""
    session = ort_session(path, threads)
    results = {}
    for t, feed in feeds.items():
        seconds, outputs = time_ort(session, feed, runs)
        results[t] = (seconds, outputs[0])
    return results


def compile_dtype(moec, path, plan, max_tokens, dtype):
    """The report's MoE layers of `path` compiled with --weight-dtype, or
    the reason moec gave for refusing (a string)."""
    try:
        return compile_plan(moec, path, plan, max_tokens,
                            [f"--weight-dtype={dtype}"])
    except subprocess.CalledProcessError as error:
        lines = (error.stderr or "").strip().splitlines() or [
            f"exit status {error.returncode}"]
        return lines[-1]


class Rooflines:
    """The best read bandwidth (bytes/s) and SGEMM rate (FLOP/s) measured so
    far in this run."""

    def __init__(self, threads):
        self.threads = threads
        self.bandwidth = self.gemm = 0.0
        self.measure()

    def measure(self):
        self.bandwidth = max(self.bandwidth, measure_bandwidth(self.threads))
        self.gemm = max(self.gemm, measure_gemm())

    def describe(self, blas):
        return (f"{self.threads} threads, read bandwidth "
                f"{self.bandwidth / 1e9:.1f} GB/s (numpy max of 1 GiB), SGEMM "
                f"{self.gemm / 1e9:.1f} GFLOP/s (numpy 2048^3; BLAS: "
                f"{blas or 'not OpenBLAS, its own thread count'}), load "
                f"average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def row_cells(row, rooflines):
    """The printed cells of a measured row (a dict, see bench_model)."""
    ours = row["ours"]

    def ms(seconds):
        return f"{seconds * 1e3:.2f}" if seconds else "-"

    def ratio(seconds):
        return f"{seconds / ours:.2f}" if seconds else "-"

    read_seconds = row["active"] / rooflines.bandwidth
    gemm_seconds = row["flops"] / rooflines.gemm
    roof = max(read_seconds, gemm_seconds)
    shape = row.get("shape_gemm")
    return [row["name"], str(row["layers"]), row["dtype"], str(row["tokens"]),
            row["label"], ms(ours), ms(row["op"]), ms(row["loop"]),
            ratio(row["op"]), ratio(row["loop"]), ratio(row["f32"]),
            f"{row['active'] / 1e6:.1f}",
            f"{100 * read_seconds / ours:.1f}",
            f"{100 * gemm_seconds / ours:.1f}",
            f"{100 * roof / ours:.1f}",
            f"{100 * gemm_seconds / roof:.1f}",
            f"{100 * shape / ours:.1f}" if shape else "-",
            f"{row['error']:.1e}"]


HEADER = ["model", "layers", "dtype", "tokens", "moe-run", "moe-run ms",
          "op ms", "loop ms", "x op", "x loop", "x f32", "active MB", "bw %",
          "gemm %", "roof %", "gemm cap %", "shape %", "max err"]
WIDTHS = [10, 6, 5, 6, 8, 10, 9, 9, 6, 6, 5, 9, 6, 6, 6, 10, 7, 8]


def dnnl_library():
    """libdnnl through ctypes, or None."""
    try:
        return ctypes.CDLL("libdnnl.so.2")
    except OSError:
        return None


def dnnl_sgemm(lib):
    """oneDNN's dnnl_sgemm."""
    fn = lib.dnnl_sgemm
    dim, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ctypes.c_char, ctypes.c_char, dim, dim, dim,
                   ctypes.c_float, ptr, dim, ptr, dim, ctypes.c_float, ptr,
                   dim]
    return fn


class DnnlMatmul:
    """oneDNN's f32 matmul primitive through its C API (oneDNN 2.x), as
    moe-run's f32 expert blocks run it: x [rows, K] @ W^T for W [out, K]
    read through strides, one primitive per shape. `product` returns None
    where oneDNN's pick is not brgemm (moe-run then runs sgemm)."""

    F32, CPU, IMPL_INFO, IN_ORDER = 3, 1, 8, 1
    SRC, DST, WEIGHTS = 1, 17, 33

    class ExecArg(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]

    def __init__(self, lib):
        self.lib = lib
        self.engine, self.stream = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(lib.dnnl_engine_create(ctypes.byref(self.engine),
                                          self.CPU, 0))
        self.check(lib.dnnl_stream_create(ctypes.byref(self.stream),
                                          self.engine, self.IN_ORDER))
        lib.dnnl_memory_set_data_handle.argtypes = [ctypes.c_void_p,
                                                    ctypes.c_void_p]
        self.primitives = {}

    @staticmethod
    def check(status):
        if status != 0:
            raise RuntimeError(f"oneDNN status {status}")

    def desc(self, rows, cols, strides):
        # dnnl_memory_desc_t is 696 bytes in oneDNN 2.6: room to spare.
        md = ctypes.create_string_buffer(2048)
        dims = (ctypes.c_int64 * 12)(rows, cols)
        st = (ctypes.c_int64 * 12)(*strides)
        self.check(self.lib.dnnl_memory_desc_init_by_strides(
            md, 2, dims, self.F32, st))
        return md

    def primitive(self, rows, out, K):
        key = (rows, out, K)
        if key in self.primitives:
            return self.primitives[key]
        lib = self.lib
        src = self.desc(rows, K, (K, 1))
        weights = self.desc(K, out, (1, K))
        dst = self.desc(rows, out, (out, 1))
        op = ctypes.create_string_buffer(8192)  # dnnl_matmul_desc_t: 2800
        self.check(lib.dnnl_matmul_desc_init(op, src, weights, None, dst))
        pd, prim = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(lib.dnnl_primitive_desc_create(ctypes.byref(pd), op,
                                                  None, self.engine, None))
        impl = ctypes.c_char_p()
        self.check(lib.dnnl_primitive_desc_query(pd, self.IMPL_INFO, 0,
                                                 ctypes.byref(impl)))
        entry = None
        if impl.value.startswith(b"brg"):
            self.check(lib.dnnl_primitive_create(ctypes.byref(prim), pd))
            mems = []
            for md in (src, weights, dst):
                mem = ctypes.c_void_p()
                self.check(lib.dnnl_memory_create(ctypes.byref(mem), md,
                                                  self.engine, None))
                mems.append(mem)
            entry = (prim, mems)
        self.primitives[key] = entry
        return entry

    def product(self, a, w, c):
        """c = a @ w.T; False where oneDNN's pick is not brgemm."""
        entry = self.primitive(a.shape[0], w.shape[0], a.shape[1])
        if entry is None:
            return False
        prim, mems = entry
        for mem, array in zip(mems, (a, w, c)):
            self.lib.dnnl_memory_set_data_handle(mem, array.ctypes.data)
        args = (self.ExecArg * 3)(*[self.ExecArg(arg, mem.value) for arg, mem
                                    in zip((self.SRC, self.WEIGHTS, self.DST),
                                           mems)])
        self.check(self.lib.dnnl_primitive_execute(prim, self.stream, 3,
                                                   args))
        self.check(self.lib.dnnl_stream_wait(self.stream))
        return True


def routed_gemm_seconds(report, stats_path):
    """Seconds oneDNN takes for one run's expert GEMMs at the routed shapes
    (`shape %` in the module docstring): its brgemm f32 matmul where it
    picks one, else its sgemm (else numpy's BLAS), on f32 matrices of each
    layer's sizes, distinct weights per expert (read from memory, as in the
    layer)."""
    with open(stats_path) as f:
        layers = json.load(f)["moe_layers"]
    rng = np.random.default_rng(1)
    work = []
    for stats, layer in zip(layers, report):
        H, F = layer["hidden"], layer["ffn"]
        up = expert_weights(layer) // H - F  # gate + up outputs of w1, w3
        runs = max(1, stats["runs"])
        for n in stats["tokens_per_expert"]:
            rows = n // runs
            if rows:
                work.append((rng.standard_normal((rows, H), dtype=np.float32),
                             np.full((up, H), 0.01, np.float32),  # [out, in]
                             rng.standard_normal((rows, F), dtype=np.float32),
                             np.full((H, F), 0.01, np.float32)))
    lib = dnnl_library()
    sgemm = dnnl_sgemm(lib) if lib else None
    matmul = DnnlMatmul(lib) if lib else None

    def product(a, w):
        """a @ w.T"""
        if not sgemm:
            return a @ w.T
        c = np.empty((a.shape[0], w.shape[0]), np.float32)
        if not matmul.product(a, w, c):
            sgemm(b"N", b"T", a.shape[0], w.shape[0], a.shape[1], 1.0,
                  a.ctypes.data, a.shape[1], w.ctypes.data, w.shape[1], 0.0,
                  c.ctypes.data, c.shape[1])
        return c

    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for x, w1, a, w2 in work:
            product(x, w1)
            product(a, w2)
        best = min(best, time.perf_counter() - start)
    return best


def print_row(cells):
    print(" ".join(c.ljust(w) if i == 0 or i == 4 else c.rjust(w)
                   for i, (c, w) in enumerate(zip(cells, WIDTHS))),
          flush=True)


def bench_model(args, name, plan_source, feeds, references, rooflines, work):
    """Compiles `plan_source` per dtype, prints its rows and returns them;
    `references` is {tokens: (op seconds, loop seconds, onnxruntime
    output)}."""
    rows = []
    moec = tools(args.build)[0]
    model = onnx.load(plan_source, load_external_data=False)
    all_bytes = weight_bytes(model)
    # (seconds, output) of each binary's f32 plan by (label, tokens).
    f32_runs = {}
    for dtype in args.dtypes.split(","):
        plan = os.path.join(work, f"{name}.{dtype}.bin")
        report = compile_dtype(moec, plan_source, plan, max(feeds), dtype)
        if isinstance(report, str):
            print(f"{name} {dtype}: skipped, moec refused: {report}",
                  flush=True)
            continue
        expert_bytes = sum(layer["experts"] * expert_weights(layer) * 4
                           for layer in report)
        for label, moe_run in runners(args):
            for t, feed in feeds.items():
                tag = f"{name}_{dtype}_{label}_{t}"
                stats = os.path.join(work, tag + ".json")
                try:
                    ours = time_moe_run(moe_run, plan, feed, args.threads,
                                        args.runs, work, tag, stats)
                except subprocess.CalledProcessError as error:
                    print(f"{name} {dtype} {label}: moe-run failed: "
                          f"{(error.stderr or '').strip()[-300:]}")
                    break
                got = np.load(os.path.join(work, tag, "output.npy"))
                if dtype == "f32":
                    f32_runs[label, t] = ours, got
                    want = references[t][2]
                else:
                    want = f32_runs.get((label, t), (0, references[t][2]))[1]
                read, flops, _ = routed_work(report, stats)
                active = (all_bytes - expert_bytes +
                          read * ITEM_BYTES[dtype] / 4)
                flops += static_flops(model, feed)
                op, loop, _ = references[t]
                f32 = f32_runs[label, t][0] if dtype != "f32" and (
                    label, t) in f32_runs else None
                rows.append(dict(name=name, layers=len(report), dtype=dtype,
                                 tokens=t, label=label, ours=ours, op=op,
                                 loop=loop, f32=f32, active=active,
                                 flops=flops,
                                 error=relative_error(got, want)))
                if "-lm" not in name and dtype == "f32":
                    rows[-1]["shape_gemm"] = routed_gemm_seconds(report,
                                                                 stats)
                print_row(row_cells(rows[-1], rooflines))
        os.remove(plan)
    return rows


def main():
    parser = cpu_models.docstring_parser(__doc__)
    add_common_arguments(parser, runs=10)
    parser.set_defaults(threads=2)
    parser.add_argument("--shapes", default="mixtral,qwen3",
                        help="layers to run: "
                        + ", ".join(cpu_models.SHAPES) + " (or none)")
    parser.add_argument("--whole", default="mixtral",
                        help="shapes whose 2-layer model to run (or none)")
    parser.add_argument("--dtypes", default="f32,bf16,int8",
                        help="moec compile --weight-dtype values")
    parser.add_argument("--moe-run", action="append", default=[],
                        metavar="[LABEL=]PATH",
                        help="another moe-run to time on the same plans "
                        "(repeatable; label: the worktree above build/bin)")
    parser.add_argument("--work", default=os.path.join(
        cpu_models.ROOT, "bench", "models", "cpu_speed"),
                        help="folder of the models (built when missing) "
                        "and of the plans while they run")
    parser.add_argument("--hidden", type=int, help="override H (quick runs)")
    parser.add_argument("--ffn", type=int, help="override F (quick runs)")
    args = parser.parse_args()
    # oneDNN's OpenMP threads for `shape %` (moe-run sets its own to 1).
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    tokens = [int(t) for t in args.tokens.split(",")]
    shapes = [s for s in args.shapes.split(",") if s != "none"]
    whole = [s for s in args.whole.split(",") if s != "none"]
    for shape in shapes + whole:
        if shape not in cpu_models.SHAPES:
            parser.error(f"unknown shape {shape!r}")

    blas = numpy_blas(args.threads)
    rooflines = Rooflines(args.threads)
    print(f"cpu: {cpu_line()}")
    print(f"machine: {rooflines.describe(blas)}", flush=True)
    for label, path in runners(args):
        print(f"moe-run {label}: {path}")

    os.makedirs(args.work, exist_ok=True)
    rows = []
    for shape in shapes + [s + "-lm" for s in whole]:
        base = shape.removesuffix("-lm")
        cfg = cpu_models.shape_config(base, args.hidden, args.ffn)
        forms = ["whole"] if shape.endswith("-lm") else ["contrib", "loop"]
        paths = {form: cpu_models.ensure(args.work, base, form, cfg)
                 for form in forms}
        model = onnx.load(paths[forms[0]], load_external_data=False)
        feeds = {t: make_inputs(model, t, 1, cpu_models.WHOLE["vocab"],
                                np.random.default_rng([0, t]))
                 for t in tokens}
        timed = {form: time_onnxruntime(path, feeds, args.threads, args.runs)
                 for form, path in paths.items()}
        op = timed.get("contrib", {})
        loop = timed.get("loop", timed.get("whole"))
        references = {t: (op[t][0] if op else None, loop[t][0],
                          (op or loop)[t][1]) for t in tokens}
        # Plans are the size of the weights: removed when the script ends.
        with tempfile.TemporaryDirectory(dir=args.work) as work:
            if "loop" in paths:
                layers = compile_plan(tools(args.build)[0], paths["loop"],
                                      os.path.join(work, "loop.bin"),
                                      max(tokens))
                os.remove(os.path.join(work, "loop.bin"))
                print(f"{shape}: moec found {len(layers)} MoE layer(s) in "
                      f"the loop form {os.path.basename(paths['loop'])}")
            rooflines.measure()
            print_row(HEADER)
            rows += bench_model(args, shape, paths[forms[0]], feeds,
                                references, rooflines, work)
    rooflines.measure()
    print(f"\nmachine (best of the run): {rooflines.describe(blas)}")
    print_row(HEADER)
    for row in rows:
        print_row(row_cells(row, rooflines))


if __name__ == "__main__":
    main()
