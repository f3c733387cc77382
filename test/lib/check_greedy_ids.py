#!/usr/bin/env python3
"""Checks moe-run's greedy ids against committed transformers references.

  check_greedy_ids.py PLAN REFERENCE.json

REFERENCE.json (examples/zoo/export_zoo_v5.py --only greedy) lists prompts
and the new ids transformers' generate(do_sample=False) produced for them;
each prompt is run through `moe-run PLAN --prompt-ids ... --max-new-tokens
N` (moe-run on PATH) and its stdout ids must be the same.
"""

import json
import subprocess
import sys


def main():
    plan, reference = sys.argv[1:3]
    cases = json.load(open(reference))["cases"]
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
