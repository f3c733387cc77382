#!/usr/bin/env python3
"""The zoo's vision encoders: moe-run against onnxruntime on the same graph.

    .venv/bin/python bench/vision_bench.py [--patches 64,256,1024]
        [--threads 1,2] [--rounds 6] [--runs 40] [--models qwen3_vl_moe,...]
        [--steps N]

For each tiny VLM export of examples/zoo/vlm/out/ (issue 32's speed bound:
the encoder within 1.5x of onnxruntime), the encoder's `image_encoder.onnx`
with its feature widths fixed and the patch count dynamic (what
`moec compile DIR` does with `--dim`) compiles once with
`--max-tokens` = the largest patch count. Each patch count p is one image of
grid 1 x h x w (h * w = p, h and w multiples of the spatial merge); the
grid's inputs (`cu_seqlens`, patch positions, Qwen's interpolation taps) come
from the grid rule the tests use (test/lib/vision_rules.py, which equals the
export's own `vision_inputs.onnx` bit for bit), the pixel patches are seeded
normal values. Llama 4's encoder takes one 32 x 32 tile (16 patches) and
runs at that size only.

Before timing, moe-run's outputs must match onnxruntime's
(max |moe-run - ort| <= --rtol * max(1, max |ort|)). Then, per thread
count, --rounds rounds in turns (the order alternating each round): one
`moe-run --bench R --warmup 3` process (its per-run times from --stats), and
R `session.run` calls of onnxruntime (intra-op threads = the same count,
after 3 warm-ups). Prints each side's min and median over all runs and the
ratios moe-run / onnxruntime (<= 1.5 meets the bound). --steps N prints
moe-run's N slowest steps (median per run) at each size. A benchmark, never
a test: run it by hand (bench/README.md).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision_rules  # noqa: E402
from compare_ort import ort_session, tools  # noqa: E402

ZOO = os.path.join(ROOT, "examples", "zoo", "vlm", "out")
# The exports' feature widths (docs/multimodal.md, "Images in, tokens out"):
# pixel values per patch, patch coordinates, interpolation taps, grid
# values; Llama 4's tile height and width.
WIDTHS = {"s87": 384, "s9": 2, "s79": 4, "s29": 3, "s99": 32, "s4": 32}
GRID_INPUTS = ("cu_seqlens", "position_ids", "interp_indices", "interp_weights")


def fix_widths(path, out):
    """Writes `path` with the WIDTHS dimensions of its inputs fixed."""
    model = onnx.load(path)
    for value in model.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in WIDTHS:
                size = WIDTHS[dim.dim_param]
                dim.Clear()
                dim.dim_value = size
    onnx.save(model, out)
    return model


def grid_of(patches, merge):
    """(h, w), multiples of `merge`, h * w = patches, as square as can be."""
    blocks = patches // (merge * merge)
    if blocks * merge * merge != patches:
        sys.exit(f"vision_bench: {patches} patches are not whole {merge} x {merge} blocks")
    rows = max(r for r in range(1, int(blocks**0.5) + 1) if blocks % r == 0)
    return rows * merge, blocks // rows * merge


def feeds_for(model, config, patches, rng):
    """The encoder's inputs for one image of `patches` patches."""
    vision = config["vision_config"]
    names = {i.name: i for i in model.graph.input}
    if "pixel_values" in names:
        side = vision["image_size"]
        return {"pixel_values": rng.standard_normal([1, 3, side, side]).astype(np.float32)}
    merge = vision["spatial_merge_size"]
    h, w = grid_of(patches, merge)
    table = int(round(vision.get("num_position_embeddings", 1)**0.5))
    rule = vision_rules.grid_inputs([[1, h, w]], merge, table)
    feeds = {"hidden_states": rng.standard_normal([patches, WIDTHS["s87"]]).astype(np.float32),
             "grid_thw": np.array([[1, h, w]], np.int64)}
    for name in GRID_INPUTS:
        if name in names:
            want = onnx.helper.tensor_dtype_to_np_dtype(names[name].type.tensor_type.elem_type)
            feeds[name] = rule[name].astype(want)
    return feeds


def plan_inputs(moec, plan):
    """The inputs the plan reads (an input the graph never reads is not
    the plan's: Qwen's grid_thw and cu_seqlens with one image)."""
    inspected = json.loads(subprocess.run([moec, "inspect", plan, "--json"], check=True,
                                          capture_output=True, text=True).stdout)
    return {t["name"] for t in inspected["schedules"][0]["tensors"] if t["input"]}


def moe_run_args(feeds, wanted, work, tag):
    args = []
    for name, value in feeds.items():
        if name in wanted:
            path = os.path.join(work, f"{tag}_{name}.npy")
            np.save(path, value)
            args += ["--input", f"{name}={path}"]
    return args


def check(moe_run, plan, inputs, session, feeds, threads, work, rtol):
    """Runs both once; returns the largest error over the outputs' scales."""
    out_dir = os.path.join(work, "out")
    subprocess.run([moe_run, plan, f"--threads={threads}", "--output-dir", out_dir] + inputs,
                   check=True, capture_output=True)
    worst = 0.0
    for output, want in zip(session.get_outputs(), session.run(None, feeds)):
        got = np.load(os.path.join(out_dir, f"{output.name}.npy"))
        if got.shape != want.shape:
            sys.exit(f"vision_bench: {output.name}: moe-run {got.shape}, onnxruntime {want.shape}")
        error = float(np.max(np.abs(got - want))) / max(1.0, float(np.max(np.abs(want))))
        worst = max(worst, error)
    if not worst <= rtol:
        sys.exit(f"vision_bench: moe-run differs from onnxruntime by {worst:.2e} (> {rtol:g})")
    return worst


def time_moe_run(moe_run, plan, inputs, threads, runs, stats):
    subprocess.run([moe_run, plan, f"--threads={threads}", f"--bench={runs}", "--warmup=3",
                    "--stats", stats] + inputs, check=True, capture_output=True)
    with open(stats) as f:
        return json.load(f)


def time_ort(session, feeds, runs):
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def slowest_steps(stats, count):
    steps = sorted(stats["steps"], key=lambda s: -s["median_ms"])[:count]
    return ", ".join(f"{s['op']} {s['name']} {s['median_ms']:.3f}" for s in steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen3_vl_moe,glm4v_moe,llama4")
    parser.add_argument("--patches", default="64,256,1024")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    moec, moe_run = tools(args.build)
    patch_counts = [int(p) for p in args.patches.split(",")]
    thread_counts = [int(t) for t in args.threads.split(",")]

    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds of {args.runs} runs each side; "
          "ms over all runs; ratio = moe-run / onnxruntime")
    print(f"{'model':13} {'patches':>7} {'thr':>3} {'moe min':>8} {'moe p50':>8} {'ort min':>8} "
          f"{'ort p50':>8} {'min x':>6} {'p50 x':>6} {'error':>8}")
    scratch = tempfile.TemporaryDirectory(prefix="moec-vision-bench-")
    work = scratch.name
    for name in args.models.split(","):
        folder = os.path.join(ZOO, name)
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        graph = os.path.join(work, f"{name}.onnx")
        model = fix_widths(os.path.join(folder, "image_encoder.onnx"), graph)
        tiled = any(i.name == "pixel_values" for i in model.graph.input)
        sizes = [16] if tiled else patch_counts
        plan = os.path.join(work, f"{name}.plan")
        subprocess.run([moec, "compile", graph, "-o", plan, f"--max-tokens={max(sizes)}"], check=True,
                       capture_output=True)
        wanted = plan_inputs(moec, plan)
        for patches in sizes:
            feeds = feeds_for(model, config, patches, np.random.default_rng([0, patches]))
            tag = f"{name}_{patches}"
            inputs = moe_run_args(feeds, wanted, work, tag)
            for threads in thread_counts:
                session = ort_session(graph, threads)
                error = check(moe_run, plan, inputs, session, feeds, threads, work, args.rtol)
                ours, theirs, last = [], [], None
                for round_ in range(args.rounds):
                    stats = os.path.join(work, f"{tag}_{threads}.json")
                    sides = ["moe", "ort"] if round_ % 2 == 0 else ["ort", "moe"]
                    for side in sides:
                        if side == "moe":
                            last = time_moe_run(moe_run, plan, inputs, threads, args.runs, stats)
                            ours += last["run_ms"]
                        else:
                            theirs += time_ort(session, feeds, args.runs)
                mo, mp = min(ours), float(np.median(ours))
                oo, op = min(theirs), float(np.median(theirs))
                print(f"{name:13} {patches:>7} {threads:>3} {mo:>8.3f} {mp:>8.3f} {oo:>8.3f} {op:>8.3f} "
                      f"{mo / oo:>6.2f} {mp / op:>6.2f} {error:>8.1e}", flush=True)
                if args.steps:
                    print(f"  slowest steps (ms): {slowest_steps(last, args.steps)}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
