#!/usr/bin/env python3
"""Checks a generation plan of an onnxruntime-genai export against its references.

  check_genai.py PLAN EXPORT_DIR [--rtol R] [--int8 | --widened] [--near-ties]
      [--run-flag=F ...]

EXPORT_DIR (examples/zoo/genai/NAME, made by make_genai.py) holds
reference.json (prompts and onnxruntime-genai's greedy new ids) and logits.npz
(onnxruntime's logits at the positions that chose them). For every prompt,
`moe-run PLAN --prompt-ids ... --max-new-tokens N --output-dir DIR` (moe-run
on PATH) must print the reference's ids, and its DIR/logits.npy (the logits
of the prompt's last position, then of each decode step) must match
onnxruntime's within R * max(1, max |logit|) (default 1e-5: float32 sums in
another order over a few hundred terms). Where reference.json says
"reference": "torch" (an export onnxruntime refuses, e.g. Gemma-4's geglu
experts), the ids and logits are the transformers model's instead.

--int8 reads reference_int8.json and logits_int8.npz instead: an int4
export's references with int8 activations (onnxruntime's accuracy_level 4 on
every MatMulNBits and QMoE node), for plans of `moec compile
--int8-activations`.

--widened reads reference_widened.json and logits_widened.npz instead: for an
fp16 export compiled with `moec compile --widen-f16`, onnxruntime-genai's
ids and onnxruntime's logits on the graph with every float16 tensor made
float32 (make_genai.py).

--near-ties is for plans that compute otherwise than the reference on
purpose (`moec compile --int8-activations` on an export whose products
onnxruntime computes in f32): step by step, while the ids agree, the logits
must agree within R * max(1, max |logit|), and the ids may part only at a
step where the reference's top-2 gap is at most twice the logits'
difference there (a near tie the two computations' difference decides);
after that the sequences no longer compare.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def compare_near_ties(got, want, ours, theirs, rtol):
    """(passed, note) of --near-ties for one prompt: ours[t] and theirs[t]
    are the logits that chose new id t."""
    worst = 0.0
    for t in range(min(len(want), len(ours))):
        error = float(np.abs(ours[t] - theirs[t]).max())
        scale = max(1.0, float(np.abs(theirs[t]).max()))
        if error > rtol * scale:
            return False, (f": logits of step {t} differ by {error:.2e} "
                           f"(scale {scale:.2f})")
        worst = max(worst, error)
        if t >= len(got) or got[t] != want[t]:
            top = np.sort(theirs[t])[-2:]
            gap = float(top[1] - top[0])
            tie = gap <= 2 * error
            return tie, (f": ids part at step {t}, the reference's top-2 gap "
                         f"{gap:.2e} {'<=' if tie else '>'} twice the logits' "
                         f"difference {error:.2e}")
    if len(got) != len(want):
        return False, f": moe-run {got} reference {want}"
    return True, f", logits max abs error {worst:.2e}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("export_dir")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--widened", action="store_true")
    parser.add_argument("--near-ties", action="store_true")
    parser.add_argument("--run-flag", dest="run_flag", action="append", default=[],
                        help="another moe-run flag, e.g. --run-flag=--devices=2")
    args = parser.parse_args()
    suffix = "_int8" if args.int8 else "_widened" if args.widened else ""
    reference = json.load(open(os.path.join(args.export_dir,
                                            f"reference{suffix}.json")))
    logits = np.load(os.path.join(args.export_dir, f"logits{suffix}.npz"))
    torch = reference.get("reference") == "torch"
    ids_source = "torch" if torch else "onnxruntime-genai"
    ok = True
    with tempfile.TemporaryDirectory() as workdir:
        for i, case in enumerate(reference["cases"]):
            prompt, want = case["prompt"], case["new_ids"]
            out = os.path.join(workdir, f"case{i}")
            run = subprocess.run(
                ["moe-run", args.plan, "--prompt-ids",
                 ",".join(map(str, prompt)), "--max-new-tokens",
                 str(len(want)), "--output-dir", out] + args.run_flag,
                capture_output=True, text=True)
            if run.returncode != 0:
                print(f"FAIL prompt of {len(prompt)}: moe-run exited "
                      f"{run.returncode}: {run.stderr.strip()}")
                ok = False
                continue
            got = [int(x) for x in run.stdout.split()]
            ours = np.load(os.path.join(out, "logits.npy"))
            theirs = logits[f"case{i}"]
            if args.near_ties:
                same, note = compare_near_ties(got, want, ours, theirs,
                                               args.rtol)
                ok &= same
                print(("ok" if same else "FAIL") +
                      f" prompt of {len(prompt)}: {len(want)} new ids" + note)
                continue
            if ours.shape != theirs.shape:
                print(f"FAIL prompt of {len(prompt)}: logits {ours.shape}, "
                      f"the reference's {theirs.shape}")
                ok = False
                continue
            error = float(np.abs(ours - theirs).max())
            scale = max(1.0, float(np.abs(theirs).max()))
            same = got == want and error <= args.rtol * scale
            ok &= same
            print(("ok" if same else "FAIL") +
                  f" prompt of {len(prompt)}: {len(want)} new ids" +
                  ("" if got == want else
                   f": moe-run {got} {ids_source} {want}") +
                  f", logits max abs error {error:.2e} (scale {scale:.2f})")
    print("genai: " + (f"matches {ids_source}" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
