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

    def run(self, *args):
        return subprocess.run([self.moe_run, *args], capture_output=True,
                              text=True, timeout=120)

    def expect(self, name, args, code, needle=None, stream="stderr"):
        """Runs moe-run with args; checks the exit code and a substring."""
        self.checks += 1
        result = self.run(*args)
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

    # Generated inputs: token count from the bound, --tokens or --dim.
    r.expect("generated inputs", [plan, "--output-dir", out], 0,
             "f32 [8, 3]", stream="stdout")
    r.expect("--tokens", [plan, "--tokens", "5", "--output-dir", out], 0,
             "f32 [5, 3]", stream="stdout")
    r.expect("--dim", [plan, "--dim", "T=2", "--output-dir", out], 0,
             "f32 [2, 3]", stream="stdout")
    a = r.run(plan, "--seed", "7", "--output-dir", r.path("a"))
    b = r.run(plan, "--seed", "7", "--output-dir", r.path("b"))
    if a.returncode == 0 and b.returncode == 0:
        r.check("seeded inputs are reproducible", np.array_equal(
            np.load(r.path("a/logits_0.npy")), np.load(r.path("b/logits_0.npy"))))

    # Benchmark and stats.
    stats = r.path("stats.json")
    r.expect("--bench", [plan, "--bench", "5", "--warmup", "2", "--stats",
                         stats, "--output-dir", out], 0,
             "median", stream="stdout")
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
    else:
        r.check("stats file written", False)

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
             "targets the cuda backend")
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
             "--tokens sets symbol 'T' to 9, outside the plan's range [1, 8]")
    r.expect("--dim of an unknown symbol", [plan, "--dim", "S=2"], 1,
             "--dim names unknown symbol 'S'")

    # Usage errors: exit 2.
    r.expect("no plan", [], 2, "no plan given")
    r.expect("unknown option", [plan, "--frobnicate", "1"], 2,
             "unknown option '--frobnicate'")
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
