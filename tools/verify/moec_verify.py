#!/usr/bin/env python3
"""moec-verify: checks a moec plan against onnxruntime on the same inputs.

    moec-verify MODEL.onnx [--plan PLAN] [--input NAME=FILE.npy ...]
                [--rtol R] [--atol A] [--tokens N] [--dim SYMBOL=N ...]
                [--seed S] [--save-inputs DIR] [--max-tokens N] [--threads N]
    moec-verify --version

Also run as `moec verify ...` and `moe-run PLAN --compare MODEL.onnx`.
Without --plan the model is compiled (`moec compile`) into a temporary plan.
moe-run runs the plan on the given inputs and generates the others (its
seeded inputs: --tokens for the token axis, --dim for any symbolic dim,
token ids over the embedding) and
saves them all (--save-inputs, a temporary directory without it);
onnxruntime then runs the model on exactly those inputs. For each output it
prints the max absolute error, the max relative error and the first index
where |plan - onnxruntime| > atol + rtol * |onnxruntime| (numpy's allclose,
as polygraphy checks); integer and bool outputs must be equal. Exit status:
0 when every output matches, 1 on a mismatch or an error, 2 on a usage
error. moec and moe-run are taken from $MOEC_BIN_DIR (set by moec and
moe-run when they run this tool), else from PATH.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

TOOL = "moec-verify"

# What the check imports, pinned as the project's requirements.txt pins them
# (test/Tools/verify-tool.test keeps the two alike): an installed moec has no
# setup script, so a missing one is named with the pip command that adds it.
REQUIREMENTS = ("numpy==2.2.6", "onnxruntime==1.23.2")


def fail(message, status=1):
    print(f"{TOOL}: error: {message}", file=sys.stderr)
    sys.exit(status)


def file_name(name):
    """moe-run's file name of tensor `name` (generated_inputs.h)."""
    out = "".join(c if c.isalnum() and c.isascii() or c in "._-" else "_"
                  for c in name)
    if out in ("", ".", ".."):
        out = "_" + out
    return out + ".npy"


def find_tool(name):
    bin_dir = os.environ.get("MOEC_BIN_DIR")
    if bin_dir and os.access(os.path.join(bin_dir, name), os.X_OK):
        return os.path.join(bin_dir, name)
    path = shutil.which(name)
    if not path:
        fail(f"{name}: not found (in $MOEC_BIN_DIR or on PATH)")
    return path


def run_tool(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        fail(f"{os.path.basename(cmd[0])} failed (exit {result.returncode}): "
             f"{' '.join(cmd)}")
    return result


def version_line():
    """This tool's --version: the release and commit of the moe-run it
    drives (the tools of one build share them), or why there is none."""
    bin_dir = os.environ.get("MOEC_BIN_DIR")
    run = (os.path.join(bin_dir, "moe-run") if bin_dir and
           os.access(os.path.join(bin_dir, "moe-run"), os.X_OK)
           else shutil.which("moe-run"))
    if not run:
        return f"{TOOL}: moe-run not found (in $MOEC_BIN_DIR or on PATH)"
    result = subprocess.run([run, "--version"], capture_output=True,
                            text=True)
    line = result.stdout.strip()
    if result.returncode != 0 or not line.startswith("moe-run "):
        return f"{TOOL}: {run} --version failed (exit {result.returncode})"
    return TOOL + line[len("moe-run"):]


def compare(np, got, want, rtol, atol):
    """(max abs error, max rel error, first mismatching index or None,
    problem) of one output."""
    if got.shape != want.shape:
        return None, None, None, (f"shape {list(got.shape)}, onnxruntime "
                                  f"{list(want.shape)}")
    if got.dtype != want.dtype:
        return None, None, None, f"dtype {got.dtype}, onnxruntime {want.dtype}"
    if got.size == 0:
        return 0.0, 0.0, None, None
    if want.dtype.kind in "biu":
        bad = got != want
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        rel = diff / np.maximum(np.abs(want.astype(np.float64)), 1e-300)
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        diff = np.abs(g - w)
        # NaN in the same place is a match; anywhere else a mismatch.
        both_nan = np.isnan(g) & np.isnan(w)
        diff = np.where(both_nan, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = np.where(diff == 0, 0.0,
                       diff / np.maximum(np.abs(w), np.finfo(np.float64).tiny))
        bad = ~both_nan & ~(diff <= atol + rtol * np.abs(w))
    first = None
    if bad.any():
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)),
                                                       bad.shape))
    return float(diff.max()), float(rel.max()), first, None


def main():
    parser = argparse.ArgumentParser(
        prog=TOOL, description="Check a moec plan against onnxruntime.")
    parser.add_argument("model", help="the ONNX model")
    parser.add_argument("--plan", help="the plan to check (default: compile "
                        "MODEL into a temporary plan)")
    parser.add_argument("--input", action="append", default=[],
                        metavar="NAME=FILE.npy", help="value of graph input "
                        "NAME (repeatable); others are generated")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--tokens", type=int, help="size of the token axis "
                        "of generated inputs (moe-run --tokens; default: "
                        "moe-run's, 16)")
    parser.add_argument("--dim", action="append", default=[],
                        metavar="SYMBOL=N", help="size of the plan's symbolic "
                        "dim SYMBOL in generated inputs (moe-run --dim; "
                        "repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-inputs", metavar="DIR",
                        help="keep the inputs (.npy) in DIR")
    parser.add_argument("--max-tokens", type=int,
                        help="moec compile --max-tokens, without --plan")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--version", action="store_true",
                        help="print the release and commit, and exit")

    def usage_error(message):
        print(f"{TOOL}: error: {message}\nrun '{TOOL} --help' for usage",
              file=sys.stderr)
        sys.exit(2)

    parser.error = usage_error
    if "--version" in sys.argv[1:]:
        print(version_line())
        return 0
    args = parser.parse_args()
    if args.rtol < 0 or args.atol < 0:
        usage_error("--rtol and --atol must be non-negative")
    for given in args.input:
        if "=" not in given or given.startswith("="):
            usage_error(f"--input expects NAME=FILE.npy, got '{given}'")
    for given in args.dim:
        name, _, size = given.partition("=")
        if not name or not size.isdigit():
            usage_error(f"--dim expects SYMBOL=N, got '{given}'")

    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        fail(f"{e.name} is not installed for {sys.executable}: the accuracy "
             "check runs onnxruntime; install what it needs with "
             f"'{sys.executable} -m pip install {' '.join(REQUIREMENTS)}' "
             "(in a source tree, scripts/setup.sh installs them into .venv)")
    if not os.path.isfile(args.model):
        fail(f"{args.model}: no such file")

    work = tempfile.mkdtemp(prefix="moec-verify-")
    try:
        plan = args.plan
        if not plan:
            plan = os.path.join(work, "plan.bin")
            cmd = [find_tool("moec"), "compile", args.model, "-o", plan]
            if args.max_tokens:
                cmd.append(f"--max-tokens={args.max_tokens}")
            run_tool(cmd)
        inputs_dir = args.save_inputs or os.path.join(work, "inputs")
        outputs_dir = os.path.join(work, "outputs")
        cmd = [find_tool("moe-run"), plan, "--save-inputs", inputs_dir,
               "--output-dir", outputs_dir, f"--seed={args.seed}"]
        for given in args.input:
            cmd += ["--input", given]
        if args.tokens is not None:
            cmd.append(f"--tokens={args.tokens}")
        for given in args.dim:
            cmd += ["--dim", given]
        if args.threads:
            cmd.append(f"--threads={args.threads}")
        ran = run_tool(cmd)
        generated = [line.split("moe-run: ", 1)[1]
                     for line in ran.stderr.splitlines()
                     if line.startswith("moe-run: input '")]

        options = ort.SessionOptions()
        if args.threads:
            options.intra_op_num_threads = args.threads
        try:
            session = ort.InferenceSession(args.model, options,
                                           providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own types
            fail(f"{args.model}: onnxruntime cannot load it: {e}")
        feeds = {}
        for value in session.get_inputs():
            path = os.path.join(inputs_dir, file_name(value.name))
            if not os.path.exists(path):
                fail(f"{plan}: the plan has no input '{value.name}' of "
                     f"{args.model}: not the same signature")
            feeds[value.name] = np.load(path)
        names = [o.name for o in session.get_outputs()]
        try:
            expected = session.run(names, feeds)
        except Exception as e:
            fail(f"{args.model}: onnxruntime failed on the inputs: {e}")

        print(f"{TOOL}: {args.model} (onnxruntime) vs {plan} (moe-run)")
        for name, value in feeds.items():
            how = next((g for g in generated if g.startswith(f"input '{name}'")),
                       None)
            print(f"  {how}" if how else
                  f"  input '{name}': given {value.dtype} {list(value.shape)}")
        rows = []
        mismatches = []
        for name, want in zip(names, expected):
            path = os.path.join(outputs_dir, file_name(name))
            if not os.path.exists(path):
                rows.append((name, "-", "-", "-", "-", "MISSING"))
                mismatches.append(f"output '{name}': the plan has no such "
                                  "output")
                continue
            got = np.load(path)
            abs_err, rel_err, first, problem = compare(np, got, np.asarray(
                want), args.rtol, args.atol)
            if problem:
                rows.append((name, str(list(want.shape)), "-", "-", "-",
                             "MISMATCH"))
                mismatches.append(f"output '{name}': {problem}")
                continue
            status = "MISMATCH" if first is not None else "ok"
            rows.append((name, str(list(want.shape)), f"{abs_err:.3g}",
                         f"{rel_err:.3g}",
                         "-" if first is None else str(list(first)), status))
            if first is not None:
                mismatches.append(
                    f"output '{name}': first mismatch at index {list(first)}: "
                    f"plan {got[first].item()!r}, onnxruntime "
                    f"{want[first].item()!r} "
                    f"(max abs error {abs_err:.3g}, max rel error "
                    f"{rel_err:.3g}; rtol {args.rtol:g}, atol {args.atol:g})")
        header = ("output", "shape", "max abs err", "max rel err",
                  "first mismatch", "status")
        widths = [max(len(r[i]) for r in rows + [header])
                  for i in range(len(header))]
        for row in [header] + rows:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths))
                  .rstrip())
        if mismatches:
            sys.stdout.flush()
            for message in mismatches:
                print(f"{TOOL}: error: {plan}: {message}", file=sys.stderr)
            print(f"{TOOL}: FAILED: {len(mismatches)} of {len(names)} "
                  f"output{'' if len(names) == 1 else 's'} "
                  f"differ{'s' if len(mismatches) == 1 else ''} from onnxruntime")
            return 1
        print(f"{TOOL}: PASSED: {len(names)} "
              f"output{'' if len(names) == 1 else 's'} "
              f"match{'es' if len(names) == 1 else ''} onnxruntime "
              f"(rtol {args.rtol:g}, atol {args.atol:g})")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
