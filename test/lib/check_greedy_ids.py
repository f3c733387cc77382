#!/usr/bin/env python3
"""Checks moe-run's greedy ids against committed transformers references.

  check_greedy_ids.py PLAN REFERENCE.json [--prompts-file WORKDIR]

REFERENCE.json (examples/zoo/export_zoo_v5.py --only greedy) lists prompts
and the new ids transformers' generate(do_sample=False) produced for them;
each prompt is run through `moe-run PLAN --prompt-ids ... --max-new-tokens
N` (moe-run on PATH) and its stdout ids must be the same.

With --prompts-file, all prompts go into one `moe-run --prompts FILE` run
instead, twice: as they are, and with a --stop-id (the reference's 6th new
id of the first prompt) that ends each sequence at its first occurrence;
each stdout line and WORKDIR/out/tokens.npy (padded with -1) must hold the
reference ids up to there.
"""

import json
import os
import subprocess
import sys

import numpy as np


def check_prompts_file(plan, cases, workdir):
    """One --prompts run over every case, without and with a stop id."""
    path = os.path.join(workdir, "prompts.txt")
    with open(path, "w") as f:
        for case in cases:
            f.write(" ".join(map(str, case["prompt"])) + "\n")
    steps = max(len(case["new_ids"]) for case in cases)
    stop = cases[0]["new_ids"][5]
    ok = True
    for extra in ([], ["--stop-id", str(stop)]):
        out = os.path.join(workdir, "out")
        run = subprocess.run(
            ["moe-run", plan, "--prompts", path, "--max-new-tokens",
             str(steps), "--output-dir", out] + extra,
            capture_output=True, text=True, check=True)
        want = []
        for case in cases:
            ids = case["new_ids"]
            if extra and stop in ids:
                ids = ids[:ids.index(stop) + 1]
            want.append(ids)
        got = [[int(x) for x in line.split()]
               for line in run.stdout.splitlines()]
        tokens = np.load(os.path.join(out, "tokens.npy"))
        longest = max(len(ids) for ids in want)
        padded = np.full((len(want), longest), -1, dtype=np.int64)
        for i, ids in enumerate(want):
            padded[i, :len(ids)] = ids
        same = got == want and tokens.shape == padded.shape and \
            (tokens == padded).all()
        ok &= same
        lengths = ",".join(str(len(ids)) for ids in got)
        print(("ok" if same else "FAIL") +
              f" --prompts with {len(cases)} prompts" +
              (f", --stop-id {stop}" if extra else "") +
              f": new ids per prompt {lengths}, tokens.npy {tokens.shape}" +
              ("" if same else f": moe-run {got} want {want}"))
    return ok


def main():
    plan, reference = sys.argv[1:3]
    cases = json.load(open(reference))["cases"]
    if len(sys.argv) == 5 and sys.argv[3] == "--prompts-file":
        ok = check_prompts_file(plan, cases, sys.argv[4])
        print("greedy: " + ("matches transformers" if ok else "MISMATCH"))
        return 0 if ok else 1
    ok = True
    for case in cases:
        prompt, want = case["prompt"], case["new_ids"]
        run = subprocess.run(
            ["moe-run", plan, "--prompt-ids", ",".join(map(str, prompt)),
             "--max-new-tokens", str(len(want)), "--stream"],
            capture_output=True, text=True, check=True)
        got = [int(x) for x in run.stdout.split()]
        same = got == want
        ok &= same
        print(("ok" if same else "FAIL") +
              f" prompt of {len(prompt)}: {len(want)} new ids" +
              ("" if same else f": moe-run {got} transformers {want}"))
    print("greedy: " + ("matches transformers" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
