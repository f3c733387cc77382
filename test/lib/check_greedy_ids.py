#!/usr/bin/env python3
"""Checks moe-run's greedy ids against committed transformers references.

  check_greedy_ids.py PLAN REFERENCE.json [--prompts-file WORKDIR]
                      [--devices N [--mpi]]

REFERENCE.json (examples/zoo/export_zoo_v5.py --only greedy) lists prompts
and the new ids transformers' generate(do_sample=False) produced for them;
each prompt is run through `moe-run PLAN --prompt-ids ... --max-new-tokens
N` (moe-run on PATH) and its stdout ids must be the same.

With --prompts-file, all prompts go into one `moe-run --prompts FILE` run
instead, twice: as they are, and with a --stop-id (the reference's 6th new
id of the first prompt) that ends each sequence at its first occurrence;
each stdout line and WORKDIR/out/tokens.npy (padded with -1) must hold the
reference ids up to there.

An expert-parallel plan (moec compile --devices N) runs with --devices N as N
threads of moe-run, or with --mpi as `mpirun -np N moe-run` on loopback.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np


def moe_run(args):
    """The command that runs moe-run on the plan's devices."""
    if not args.devices:
        return ["moe-run", args.plan]
    if not args.mpi:
        return ["moe-run", args.plan, "--devices", str(args.devices)]
    # Open MPI refuses root without both variables; --oversubscribe lets N
    # ranks share this machine's cores.
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return ["mpirun", "-np", str(args.devices), "--oversubscribe",
            "--bind-to", "none", "moe-run", args.plan]


def check_prompts_file(command, cases, workdir):
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
            command + ["--prompts", path, "--max-new-tokens",
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("reference")
    parser.add_argument("--prompts-file", metavar="WORKDIR")
    parser.add_argument("--devices", type=int, default=0)
    parser.add_argument("--mpi", action="store_true")
    args = parser.parse_args()
    command = moe_run(args)
    cases = json.load(open(args.reference))["cases"]
    if args.prompts_file:
        ok = check_prompts_file(command, cases, args.prompts_file)
        print("greedy: " + ("matches transformers" if ok else "MISMATCH"))
        return 0 if ok else 1
    ok = True
    for case in cases:
        prompt, want = case["prompt"], case["new_ids"]
        run = subprocess.run(
            command + ["--prompt-ids", ",".join(map(str, prompt)),
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
