"""CLI test of moe-run: results, generated inputs, bench/stats and every
error path (bad plans, bad inputs, bad options) with its exit code and
message. Run by ctest:

    moe_run_cli_test.py --moe-run BIN --make-plans BIN --workdir DIR
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np


class Runner:
    def __init__(self, moe_run, workdir):
        self.moe_run = moe_run
        self.workdir = workdir
        self.failures = 0
        self.checks = 0

    def path(self, name):
        return os.path.join(self.workdir, name)

    def run(self, *args, cwd=None):
        return subprocess.run([self.moe_run, *args], capture_output=True,
                              text=True, timeout=120, cwd=cwd)

    def expect(self, name, args, code, needle=None, stream="stderr",
               cwd=None):
        """Runs moe-run with args; checks the exit code and a substring."""
        self.checks += 1
        result = self.run(*args, cwd=cwd)
        text = result.stderr if stream == "stderr" else result.stdout
        ok = result.returncode == code and (needle is None or needle in text)
        if not ok:
            self.failures += 1
            print(f"FAIL {name}: exit {result.returncode} (want {code}), "
                  f"want {needle!r} in {stream}\n  stdout: {result.stdout}\n"
                  f"  stderr: {result.stderr}")
        else:
            print(f"ok   {name}")
        return result

    def check(self, name, condition, detail=""):
        self.checks += 1
        if condition:
            print(f"ok   {name}")
        else:
            self.failures += 1
            print(f"FAIL {name} {detail}")


def reference(x, ids):
    table = np.array([[i + j / 10 for j in range(4)] for i in range(5)],
                     np.float32)
    weight = np.array([[(i - j) / 4 for j in range(3)] for i in range(4)],
                      np.float32)
    return np.maximum((x + table[ids]) @ weight, 0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--moe-run", required=True)
    parser.add_argument("--make-plans", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    subprocess.run([args.make_plans, args.workdir], check=True)
    r = Runner(args.moe_run, args.workdir)
    plan = r.path("embed.plan")
    out = r.path("out")

    # Given inputs: the output matches numpy.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    ids = np.array([4, 0, 2], np.int64)
    np.save(r.path("x.npy"), x)
    np.save(r.path("ids.npy"), ids)
    result = r.expect("given inputs", [plan, "--input", f"x={r.path('x.npy')}",
                                       "--input", f"ids={r.path('ids.npy')}",
                                       "--output-dir", out, "--threads", "2"],
                      0, "output logits:0: f32 [3, 3]", stream="stdout")
    if result.returncode == 0:
        y = np.load(os.path.join(out, "logits_0.npy"))
        r.check("output matches numpy", np.allclose(y, reference(x, ids),
                                                    atol=1e-5), str(y))

    # Generated inputs: 16 tokens by default, clamped to the bound 8 with a
    # note; --tokens or --dim. Each generated input is one line on stderr,
    # the ids in the plan's value range.
    result = r.expect("generated inputs", [plan, "--output-dir", out], 0,
                      "f32 [8, 3]", stream="stdout")
    r.check("generated inputs are described",
            "symbol 'T' of the generated inputs is 8, the plan's largest "
            "(range [1, 8]), not the default 16" in result.stderr and
            "moe-run: input 'x': generated f32 [8, 4], uniform in [-1, 1), "
            "seed 0" in result.stderr and
            "moe-run: input 'ids': generated i64 [8], uniform in [0, 5) "
            "(the plan's value range), seed 0" in result.stderr,
            result.stderr)
    r.check("nothing but outputs and timing on stdout",
            all(line.startswith(("output ", "moe-run: latency",
                                 "moe-run: throughput"))
                for line in result.stdout.splitlines()), result.stdout)
    r.expect("--tokens", [plan, "--tokens", "5", "--output-dir", out], 0,
             "f32 [5, 3]", stream="stdout")
    r.expect("--dim", [plan, "--dim", "T=2", "--output-dir", out], 0,
             "f32 [2, 3]", stream="stdout")
    # Without --output-dir nothing is written (here: into the cwd).
    quiet = r.path("quiet")
    os.makedirs(quiet)
    r.expect("no --output-dir", [plan], 0, "output logits:0: f32 [8, 3]\n",
             stream="stdout", cwd=quiet)
    r.check("no --output-dir writes no file", os.listdir(quiet) == [],
            str(os.listdir(quiet)))
    # --save-inputs writes what was generated (and what was given): running
    # them as --input gives the same outputs.
    saved = r.path("saved")
    r.expect("--save-inputs", [plan, "--seed", "3", "--save-inputs", saved,
                               "--output-dir", r.path("gen")], 0)
    if os.path.isdir(saved):
        ids_saved = np.load(os.path.join(saved, "ids.npy"))
        r.check("saved ids span the value range",
                ids_saved.dtype == np.int64 and ids_saved.shape == (8,) and
                ids_saved.min() >= 0 and ids_saved.max() < 5 and
                len(set(ids_saved.tolist())) > 2, str(ids_saved))
        r.expect("saved inputs run", [plan, "--input",
                                      f"x={saved}/x.npy", "--input",
                                      f"ids={saved}/ids.npy", "--output-dir",
                                      r.path("given")], 0)
        r.check("saved inputs reproduce the outputs", np.array_equal(
            np.load(r.path("gen/logits_0.npy")),
            np.load(r.path("given/logits_0.npy"))))
        r.check("saved inputs match numpy", np.allclose(
            np.load(r.path("gen/logits_0.npy")),
            reference(np.load(os.path.join(saved, "x.npy")), ids_saved),
            atol=1e-5))
    a = r.run(plan, "--seed", "7", "--output-dir", r.path("a"))
    b = r.run(plan, "--seed", "7", "--output-dir", r.path("b"))
    if a.returncode == 0 and b.returncode == 0:
        r.check("seeded inputs are reproducible", np.array_equal(
            np.load(r.path("a/logits_0.npy")), np.load(r.path("b/logits_0.npy"))))

    # Benchmark and stats.
    stats = r.path("stats.json")
    result = r.expect("--bench", [plan, "--bench", "5", "--warmup", "2",
                                  "--tokens", "4", "--stats", stats,
                                  "--output-dir", out], 0,
                      "moe-run: latency over 5 runs, after 2 warm-ups, 2 "
                      "threads: mean ", stream="stdout")
    r.check("--bench prints the percentiles and the throughput",
            all(word in result.stdout for word in
                ["stddev", "p50", "p90", "p99", "min", "max", "runs/s",
                 "tokens/s (4 tokens per run: T=4)"]), result.stdout)
    if os.path.exists(stats):
        with open(stats) as f:
            data = json.load(f)
        r.check("stats lists every step",
                [s["op"] for s in data["steps"]] ==
                ["Gather", "Add", "MatMul", "Relu"] and
                all(s["calls"] == 5 for s in data["steps"]) and
                data["runs"] == 5, str(data))
        r.check("stats of a plan without MoE layers list none",
                data.get("moe_layers") == [], str(data))
        times = np.array(data["run_ms"])
        r.check("stats hold the per-run times and their summary",
                len(times) == 5 and not data["cold"] and
                data["warmup_runs"] == 2 and
                abs(data["mean_ms"] - times.mean()) < 1e-5 and
                abs(data["stddev_ms"] - times.std(ddof=1)) < 1e-5 and
                all(abs(data[f"p{q}_ms"] - np.percentile(times, q)) < 1e-5
                    for q in (50, 90, 99)) and
                data["median_ms"] == data["p50_ms"] and
                abs(data["min_ms"] - times.min()) < 1e-5 and
                abs(data["max_ms"] - times.max()) < 1e-5 and
                data["token_dims"] == {"T": 4} and
                data["tokens_per_run"] == 4 and
                abs(data["runs_per_s"] - 1e3 / times.mean()) <
                1e-3 * data["runs_per_s"] and
                abs(data["tokens_per_s"] - 4 * data["runs_per_s"]) <
                1e-3 * data["tokens_per_s"], str(data))
        r.check("stats hold each step's median and p90 per run",
                data["step_sample_runs"] == 5 and
                all(0 <= s["median_ms"] <= s["p90_ms"] and
                    s["median_ms"] <= s["total_ms"] for s in data["steps"]),
                str(data["steps"]))
    else:
        r.check("stats file written", False)
    # A single run without warm-up is timed and said to be cold.
    result = r.expect("cold run", [plan, "--stats", stats], 0,
                      "moe-run: latency of 1 run, cold (no warm-up",
                      stream="stdout")
    with open(stats) as f:
        data = json.load(f)
    r.check("cold stats say so", data["cold"] and data["runs"] == 1 and
            data["warmup_runs"] == 0 and len(data["run_ms"]) == 1, str(data))
    # --duration runs until the time has passed, at least --bench runs.
    result = r.expect("--duration", [plan, "--duration", "0.2", "--bench",
                                     "3", "--stats", stats], 0,
                      "after 1 warm-up", stream="stdout")
    with open(stats) as f:
        data = json.load(f)
    r.check("--duration runs for its time", data["runs"] >= 3 and
            sum(data["run_ms"]) <= 200 + 50 * max(data["run_ms"]) and
            data["runs"] == len(data["run_ms"]), str(data["runs"]))

    # Bad plans.
    r.expect("missing plan", [r.path("nope.plan")], 1, "cannot open")
    with open(plan, "rb") as f:
        content = f.read()
    with open(r.path("truncated.plan"), "wb") as f:
        f.write(content[:len(content) // 2])
    r.expect("truncated plan", [r.path("truncated.plan")], 1, "truncated")
    flipped = bytearray(content)
    flipped[len(content) - 10] ^= 0x40
    with open(r.path("flipped.plan"), "wb") as f:
        f.write(flipped)
    r.expect("corrupt weights", [r.path("flipped.plan")], 1,
             "weights checksum mismatch")
    with open(r.path("text.plan"), "w") as f:
        f.write("not a plan at all, but long enough to hold a header. " * 3)
    r.expect("not a plan", [r.path("text.plan")], 1, "bad magic")
    r.expect("cuda plan", [r.path("cuda.plan")], 1,
             "targets the cuda backend; the CPU backend runs cpu plans; run "
             "it on a GPU with moe-run --backend cuda")
    r.expect("multi-device plan", [r.path("multi.plan")], 1,
             "2 device schedules")

    # Bad inputs.
    xi = r.path("x")
    np.save(r.path("x64.npy"), x.astype(np.float64))
    r.expect("unsupported npy dtype", [plan, "--input", f"x={r.path('x64.npy')}"],
             1, "dtype '<f8' is not supported")
    np.save(r.path("xi.npy"), x.astype(np.int64))
    r.expect("wrong dtype", [plan, "--input", f"x={r.path('xi.npy')}"], 1,
             "input 'x': has dtype i64; the plan expects f32")
    np.save(r.path("x5.npy"), np.zeros((3, 5), np.float32))
    r.expect("wrong static dim", [plan, "--input", f"x={r.path('x5.npy')}"], 1,
             "dim 1 is 5; the plan expects 4")
    np.save(r.path("x1d.npy"), np.zeros(4, np.float32))
    r.expect("wrong rank", [plan, "--input", f"x={r.path('x1d.npy')}"], 1,
             "has rank 1; the plan expects 2")
    np.save(r.path("xbig.npy"), np.zeros((9, 4), np.float32))
    r.expect("too many tokens", [plan, "--input", f"x={r.path('xbig.npy')}"],
             1, "dim 0 is 9; the plan allows [1, 8] for symbol 'T'")
    np.save(r.path("ids4.npy"), np.zeros(4, np.int64))
    r.expect("symbol disagreement",
             [plan, "--input", f"x={r.path('x.npy')}", "--input",
              f"ids={r.path('ids4.npy')}"], 1,
             "disagree on symbol 'T' (3 vs 4)")
    np.save(r.path("idsbad.npy"), np.array([0, 9, 1], np.int64))
    r.expect("index out of range",
             [plan, "--input", f"x={r.path('x.npy')}", "--input",
              f"ids={r.path('idsbad.npy')}"], 1,
             "step 0 'embed' (Gather): index 9 at position 1 is out of range")
    r.expect("unknown input", [plan, "--input", f"q={r.path('x.npy')}"], 1,
             "unknown input 'q'; the plan's inputs are: 'x', 'ids'")
    r.expect("input given twice",
             [plan, "--input", f"x={r.path('x.npy')}", "--input",
              f"x={r.path('x.npy')}"], 1, "input 'x' is given twice")
    with open(r.path("corrupt.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'")
    r.expect("corrupt npy", [plan, "--input", f"x={r.path('corrupt.npy')}"], 1,
             "not a valid .npy file")
    r.expect("missing npy", [plan, "--input", f"x={xi}/none.npy"], 1,
             "cannot open")
    r.expect("--tokens over the bound", [plan, "--tokens", "9"], 1,
             "--tokens 9 sets symbol 'T' to 9, outside the plan's range "
             "[1, 8]; compile with --max-tokens 9 or pass --tokens 8")
    r.expect("--dim of an unknown symbol", [plan, "--dim", "S=2"], 1,
             f"moe-run: error: {plan}: --dim S=2: the plan has no symbol 'S' "
             "(its symbols: T)")

    # Usage errors: exit 2.
    result = r.expect("no plan", [], 2,
                      "moe-run: error: no plan given\nrun 'moe-run --help' "
                      "for usage\n")
    r.check("a usage error prints a hint, not the help",
            "usage:" not in result.stderr, result.stderr)
    r.expect("unknown option", [plan, "--frobnicate", "1"], 2,
             "unknown option '--frobnicate'")
    r.expect("unknown option last", [plan, "--frobnicate"], 2,
             "moe-run: error: unknown option '--frobnicate'")
    r.expect("bad duration", [plan, "--duration", "0"], 2,
             "--duration needs a number of seconds in (0, 86400]")
    r.expect("bad thread count", [plan, "--threads", "0"], 2,
             "--threads needs an integer")
    r.expect("bad input syntax", [plan, "--input", "x.npy"], 2,
             "--input expects NAME=VALUE")
    r.expect("missing value", [plan, "--bench"], 2, "--bench needs a value")
    r.expect("help", ["--help"], 0, "usage: moe-run", stream="stdout")

    print(f"{r.checks - r.failures} of {r.checks} checks passed")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
