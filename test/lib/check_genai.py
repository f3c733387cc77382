#!/usr/bin/env python3
"""Checks a generation plan of an onnxruntime-genai export against its references.

  check_genai.py PLAN EXPORT_DIR [--rtol R]

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
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("export_dir")
    parser.add_argument("--rtol", type=float, default=1e-5)
    args = parser.parse_args()
    reference = json.load(open(os.path.join(args.export_dir,
                                            "reference.json")))
    logits = np.load(os.path.join(args.export_dir, "logits.npz"))
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
                 str(len(want)), "--output-dir", out],
                capture_output=True, text=True)
            if run.returncode != 0:
                print(f"FAIL prompt of {len(prompt)}: moe-run exited "
                      f"{run.returncode}: {run.stderr.strip()}")
                ok = False
                continue
            got = [int(x) for x in run.stdout.split()]
            ours = np.load(os.path.join(out, "logits.npy"))
            theirs = logits[f"case{i}"]
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
