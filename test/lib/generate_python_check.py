#!/usr/bin/env python3
"""`moert.Generator` from Python on a generation plan of 1 and of N devices.

  generate_python_check.py ONE.plan EP.plan REFERENCE.json

(`import moert` from PYTHONPATH.) Checks that both plans generate
transformers' greedy ids of REFERENCE.json (examples/zoo/export_zoo_v5.py
--only greedy), passing each id to on_token as it is drawn; that seeded
sampling draws the same ids on both from logits within float tolerance;
and that mistakes raise clear exceptions: an id outside the vocabulary
ValueError, an exception in on_token itself; and that such an exception
ends the generation after that id, on both plans (no further decode step:
times' new_tokens and decode_steps, stopped_early).
Exit 0 when all hold.
"""

import json
import sys

import numpy as np

import moert


def main():
    one_path, ep_path, reference = sys.argv[1:4]
    cases = json.load(open(reference))["cases"]
    plans = [moert.Plan(one_path), moert.Plan(ep_path)]
    gens = [moert.Generator(plan, threads=1) for plan in plans]
    print(f"ok devices {[g.num_devices for g in gens]}")
    ok = True
    for gen in gens:
        for case in cases:
            seen = []
            ids = gen.generate(case["prompt"],
                               max_new_tokens=len(case["new_ids"]),
                               on_token=seen.append)
            same = ids == case["new_ids"] and seen == ids
            ok &= same
            print(("ok" if same else "FAIL") +
                  f" {gen.num_devices} device(s), prompt of "
                  f"{len(case['prompt'])}: {len(ids)} new ids" +
                  ("" if same else f": {ids} want {case['new_ids']}"))
        times = gen.times
        ok &= times["new_tokens"] == len(cases[-1]["new_ids"])
    drawn, logits = [], []
    for gen in gens:
        drawn.append(gen.generate([3, 14, 15], max_new_tokens=12,
                                  temperature=1.0, top_k=20, top_p=0.9,
                                  seed=11))
        logits.append(gen.logits)
    same = drawn[0] == drawn[1] and np.allclose(logits[0], logits[1],
                                                rtol=1e-5, atol=1e-5)
    ok &= same
    print(("ok" if same else "FAIL") + f" sampling: {drawn[0]}" +
          ("" if same else f" vs {drawn[1]}"))
    try:
        gens[1].generate([3, 500])
        ok = False
        print("FAIL no error for an id outside the vocabulary")
    except ValueError as e:
        print(f"ok ValueError: {e}")

    class Stop(Exception):
        pass

    for gen in gens:
        seen = []

        def stop_after_two(token):
            seen.append(token)
            if len(seen) == 2:
                raise Stop(f"on_token saw {seen}")
        try:
            gen.generate([3, 14], max_new_tokens=20, on_token=stop_after_two)
            ok = False
            print("FAIL on_token's exception was lost")
            continue
        except Stop as e:
            raised = str(e)
        t = gen.times
        stopped = (len(seen) == 2 and t["new_tokens"] == 2 and
                   t["decode_steps"] == 1 and t["stopped_early"])
        ok &= stopped
        print(("ok" if stopped else "FAIL") +
              f" {gen.num_devices} device(s): on_token raised ({raised}); "
              f"the generation stopped after {t['new_tokens']} of 20 ids, "
              f"{t['decode_steps']} decode step(s)")
    gens[1].generate([3, 14], max_new_tokens=3)
    ok &= not gens[1].times["stopped_early"]
    print("python generate: " + ("ok" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
