#!/usr/bin/env python3
"""moe-run against onnxruntime (CPU, same thread count) on the same ONNX files.

For each model and token count: compiles once with moec (--max-tokens = the
largest count), times `moe-run --bench` (median) and onnxruntime (median of the
same number of runs after a warm-up) on the same random inputs, and prints

  ratio      onnxruntime time / moe-run time (> 1: moe-run is faster)
  bw_frac    roofline by bytes: (weight bytes + input/output bytes) / measured
             memory bandwidth, over moe-run's time
  gemm_frac  roofline by FLOPs: MatMul/Gemm FLOPs of the static-shape graph
             (onnx shape inference at that token count; ops whose shapes
             depend on data, like per-expert loops, are not counted) / the
             measured BLAS SGEMM rate, over moe-run's time

Bandwidth is measured by a maximum over a 1 GiB buffer on --threads threads,
the GEMM rate with a 2048^3 float32 numpy matmul, both with the same thread
count. This is a benchmark,
never a test: run it by hand (see bench/README.md).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import onnxruntime as ort
from onnx import shape_inference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
from e2e import make_inputs  # noqa: E402


def measure_bandwidth(threads=1, mib=1024):
    """Read bandwidth of `threads` threads reducing disjoint slices of a
    buffer of `mib` MiB (several times any last-level cache): the access
    pattern of streaming weights. The reduction is a maximum, not a sum:
    numpy's float32 sum is pairwise and compute-bound below the memory's
    speed on some CPUs (1.5 against 4.7 GB/s for the maximum, one thread of
    a Xeon). numpy releases the GIL in reductions, so the threads run in
    parallel. Best of 5, in bytes per second."""
    data = np.ones(mib * 256 * 1024, dtype=np.float32)
    slices = np.array_split(data, threads)
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(5):
            start = time.perf_counter()
            list(pool.map(np.maximum.reduce, slices))
            best = min(best, time.perf_counter() - start)
    return data.nbytes / best


def measure_gemm(n=2048):
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = a.copy()
    a @ b
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def static_flops(model, feeds):
    """MatMul/Gemm FLOPs of `model` with its inputs fixed to `feeds`' shapes."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for value in model.graph.input:
        if value.name in feeds:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, feeds[value.name].shape):
                dim.Clear()
                dim.dim_value = size
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    shapes = {}
    for value in list(inferred.graph.value_info) + list(
            inferred.graph.input) + list(inferred.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [d.dim_value for d in dims]
    for init in inferred.graph.initializer:
        shapes[init.name] = list(init.dims)
    flops = 0
    for node in inferred.graph.node:
        if node.op_type not in ("MatMul", "Gemm"):
            continue
        a, b = shapes.get(node.input[0]), shapes.get(node.input[1])
        out = shapes.get(node.output[0])
        if not a or not b or not out:
            continue
        k = a[-1] if node.op_type == "MatMul" else (
            a[0] if any(x.name == "transA" and x.i for x in node.attribute)
            else a[-1])
        flops += 2 * int(np.prod(out)) * k
    return flops


def weight_bytes(model):
    """Bytes of the initializers, from their declared shapes: works on a model
    loaded without its external data."""
    return sum(
        int(np.prod(t.dims, dtype=np.int64)) *
        onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        for t in model.graph.initializer)


def save_inputs(feeds, work, tag):
    """Writes `feeds` as .npy files; returns the moe-run --input arguments."""
    args = []
    for input_name, value in feeds.items():
        safe = "".join(c if c.isalnum() else "_" for c in input_name)
        file = os.path.join(work, f"{tag}_{safe}.npy")
        np.save(file, value)
        args += ["--input", f"{input_name}={file}"]
    return args


def time_moe_run(moe_run, plan, feeds, threads, runs, work, tag, stats=None):
    """Median (p50) seconds of `moe-run --bench` on `feeds`; writes its outputs to
    work/tag (and --stats to `stats` when given)."""
    out_dir = os.path.join(work, tag)
    cmd = [moe_run, plan, f"--threads={threads}", f"--bench={runs}",
           "--warmup=3", "--output-dir", out_dir]
    cmd += save_inputs(feeds, work, tag)
    if stats:
        cmd += ["--stats", stats]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"p50 ([0-9.]+) ms", out).group(1)) / 1e3


def default_bounds(path):
    """`--bound batch=1` for a model with a `batch` input dimension (moec
    refuses a --bound naming a dimension the model does not have)."""
    model = onnx.load(path, load_external_data=False)
    names = {d.dim_param for i in model.graph.input
             for d in i.type.tensor_type.shape.dim}
    return ["--bound=batch=1"] if "batch" in names else []


def ort_session(path, threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options,
                                providers=["CPUExecutionProvider"])


def time_ort(session, feeds, runs):
    """Median seconds of `runs` onnxruntime runs after 3 warm-up runs, and
    the outputs."""
    for _ in range(3):
        outputs = session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times)), outputs


def add_common_arguments(parser, runs):
    """The options every benchmark script takes."""
    parser.add_argument("--tokens", default="1,16,256")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))


def tools(build):
    """Paths of moec and moe-run in a build folder."""
    return (os.path.join(build, "bin", "moec"),
            os.path.join(build, "bin", "moe-run"))


def measure_machine(threads):
    """Measures the two rooflines and prints them; returns (bandwidth in
    bytes/s, SGEMM rate in FLOP/s)."""
    bandwidth = measure_bandwidth(threads)
    gemm = measure_gemm()
    print(f"machine: {threads} threads, memory bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s (read), SGEMM "
          f"{gemm / 1e9:.1f} GFLOP/s (numpy 2048^3)")
    return bandwidth, gemm


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    add_common_arguments(parser, runs=50)
    parser.add_argument("--int-high", type=int, default=16)
    parser.add_argument("--bound", action="append", default=None,
                        help="moec --bound NAME=N (default: batch=1 where the "
                        "model has a batch dimension)")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    moec, moe_run = tools(args.build)

    bandwidth, gemm = measure_machine(args.threads)
    print(f"{'model':34} {'tokens':>6} {'moe-run ms':>10} {'ort ms':>9} "
          f"{'ratio':>6} {'bw_frac':>8} {'gemm_frac':>9}")
    # Plans are the size of the weights: removed when the script ends.
    scratch = tempfile.TemporaryDirectory(prefix="moec-bench-")
    work = scratch.name
    for path in args.models:
        model = onnx.load(path)
        name = os.path.splitext(os.path.basename(path))[0]
        plan = os.path.join(work, name + ".bin")
        bounds = ([f"--bound={b}" for b in args.bound] if args.bound
                  else default_bounds(path))
        subprocess.run([moec, "compile", path, "-o", plan,
                        f"--max-tokens={max(tokens)}"] + bounds, check=True,
                       stderr=subprocess.DEVNULL)
        session = ort_session(path, args.threads)
        wbytes = weight_bytes(model)
        for t in tokens:
            rng = np.random.default_rng([0, t])
            feeds = make_inputs(model, t, 1, args.int_high, rng)
            ours = time_moe_run(moe_run, plan, feeds, args.threads, args.runs,
                                work, f"{name}_{t}")
            theirs, _ = time_ort(session, feeds, args.runs)
            io = sum(v.nbytes for v in feeds.values())
            bw_frac = (wbytes + io) / bandwidth / ours
            flops = static_flops(model, feeds)
            gemm_frac = flops / gemm / ours if flops else float("nan")
            print(f"{name:34} {t:>6} {ours * 1e3:>10.3f} {theirs * 1e3:>9.3f} "
                  f"{theirs / ours:>6.2f} {bw_frac:>8.3f} {gemm_frac:>9.3f}")


if __name__ == "__main__":
    main()
