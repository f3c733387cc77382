#!/usr/bin/env python3
"""`moert.BatchGenerator`: continuous batching on a generation plan.

  batch_generate_check.py [--tolerance T] BATCHED.plan REFERENCE.json
      [SERIAL.plan SERIAL.json]

(`import moert` from PYTHONPATH.) BATCHED.plan is a generation pair the
compiler proved batchable, SERIAL.plan one it did not (served one sequence
at a time). Checks that:

* on BATCHED.plan each of 16 sequences (REFERENCE's four prompts, four
  times each, the second eight added while the first eight decode) draws
  the reference's greedy ids (transformers', or onnxruntime-genai's for
  its exports, whose recurrent states the runtime keeps per sequence),
  and that every logits row it drew from is
  within 5e-4 (relative to the row's largest magnitude) of the same
  sequence's run alone; a differing id is accepted only at a recorded
  near-tie of the solo logits (none is expected here). The rows of a step
  go through the GEMM and expert kernels together, whose summation order
  depends on the row count, and this random-weight pair magnifies f32
  rounding: the largest difference measured on the zoo pair is 5.6e-5
  with oneDNN's AVX2 kernels and 1.3e-4 with its AVX-512 ones (the same
  build, ONEDNN_MAX_CPU_ISA=AVX2 or not, on an AMD EPYC with AVX-512);
  since the one-row AVX-512 streaming kernels (kernels/stream.cpp) it is
  2.1e-4, and two solo runs alone, with those kernels and with the
  batch-invariant ones, differ by 2.7e-4 at one position. Issue 29 asks
  for 1e-5, which needs kernels whose
  summation order does not depend on the rows (the ids are all equal).
  With MOERT_BATCH_INVARIANT=1 in the environment the kernels are such
  (kernels/batch_invariant.h), and the logits must equal alone bit for
  bit. --tolerance T replaces 5e-4 (block-quantized exports: with int8
  activations a step of more than 8 rows multiplies dequantized codes in
  f32 where one of at most 8 rows sums integer products, so a decode row
  beside 8 others is rounded differently from alone);
* a cancelled sequence ends with a 'cancelled' event, frees its slot, and
  leaves the others' ids unchanged;
* the per-layer expert selection counts add up to top-k per row run;
* SERIAL.plan (when given) says why it is not batched and, given four
  sequences at once, still draws SERIAL.json's reference ids, one sequence
  at a time.

REFERENCE.json and SERIAL.json hold `cases` of `prompt` and `new_ids` (the
zoo's transformers references and make_genai.py's onnxruntime-genai ones
alike); the models route to 2 experts per token.

Exit 0 when all hold.
"""

import json
import os
import sys

import numpy as np

import moert

TOLERANCE = 0.0 if os.environ.get("MOERT_BATCH_INVARIANT") == "1" else 5e-4


def run(batch, requests, add_later=(), cancel=None):
    """Adds `requests` (prompt, max_new_tokens), then `add_later` after the
    second step (and cancels the sequence index `cancel` after the third);
    steps until done. Returns per request its ids, logits rows and finish."""
    ids = [batch.add(p, max_new_tokens=n) for p, n in requests]
    out = {i: ([], [], None) for i in ids}
    step = 0
    while batch.has_work:
        step += 1
        if step == 3 and add_later:
            for p, n in add_later:
                sid = batch.add(p, max_new_tokens=n)
                ids.append(sid)
                out[sid] = ([], [], None)
        if step == 4 and cancel is not None:
            assert batch.cancel(ids[cancel])
        for sid, token, finish in batch.step():
            tokens, rows, _ = out[sid]
            if token >= 0:
                tokens.append(token)
                # A sequence's logits go with it: its last token has none.
                if finish is None:
                    rows.append(batch.last_logits(sid).copy())
            if finish is not None:
                out[sid] = (tokens, rows, finish)
    return [out[i] for i in ids]


def near_tie(row, gap):
    top = np.sort(row)[-2:]
    return top[1] - top[0] <= gap * max(1.0, np.abs(row).max())


def check_serial(serial_path, serial_reference):
    serial = moert.BatchGenerator(moert.Plan(serial_path), slots=16,
                                  threads=1)
    print(f"serial: blocker '{serial.batch_blocker}', slots {serial.slots}")
    serial_cases = json.load(open(serial_reference))["cases"]
    requests = [(c["prompt"], len(c["new_ids"])) for c in serial_cases]
    results = run(serial, requests)
    good = serial.batch_blocker != "" and all(
        r[0] == c["new_ids"] for r, c in zip(results, serial_cases))
    print(("ok" if good else "FAIL") +
          f" serial: {len(results)} sequences one at a time drew the "
          "reference ids")
    return good


def main():
    global TOLERANCE
    args = sys.argv[1:]
    if args[:1] == ["--tolerance"] and len(args) > 1:
        TOLERANCE = float(args[1])
        args = args[2:]
    if len(args) not in (2, 4):
        sys.exit(__doc__)
    batched_path, reference = args[0:2]
    serial_path, serial_reference = (args[2:4] if len(args) == 4
                                     else (None, None))
    cases = json.load(open(reference))["cases"]
    plan = moert.Plan(batched_path)
    ok = True

    batch = moert.BatchGenerator(plan, slots=16, threads=1, keep_logits=True)
    print(f"batched: blocker '{batch.batch_blocker}', slots {batch.slots}, "
          f"rows per step {batch.max_step_rows}, logits within "
          f"{TOLERANCE:.0e} of alone")
    ok &= batch.batch_blocker == ""
    solo = []
    for case in cases:
        alone = moert.BatchGenerator(plan, slots=1, threads=1,
                                     keep_logits=True)
        solo.append(run(alone, [(case["prompt"], len(case["new_ids"]))])[0])
    requests = [(c["prompt"], len(c["new_ids"])) for c in cases] * 2
    results = run(batch, requests, add_later=requests)
    stats = batch.stats()
    print(f"16 sequences in {stats['steps']} steps, {stats['rows']} rows "
          f"({stats['prompt_rows']} prompt rows), "
          f"{stats['new_tokens']} new tokens")
    for k, (tokens, rows, finish) in enumerate(results):
        case = cases[k % len(cases)]
        solo_tokens, solo_rows, _ = solo[k % len(cases)]
        worst = 0.0
        ties = 0
        same = True
        for t, (a, b) in enumerate(zip(rows, solo_rows)):
            worst = max(worst, float(np.abs(a - b).max() /
                                     max(np.abs(b).max(), 1e-30)))
            if tokens[t] != solo_tokens[t]:
                if near_tie(b, 2 * TOLERANCE):
                    ties += 1
                    print(f"  sequence {k}: near-tie at new id {t}")
                    break
                same = False
        good = (same and worst <= TOLERANCE and finish == "length" and
                (ties > 0 or tokens == case["new_ids"]))
        ok &= good
        print(("ok" if good else "FAIL") +
              f" sequence {k}, prompt of {len(case['prompt'])}: "
              f"{len(tokens)} new ids, logits within {worst:.1e} of alone" +
              ("" if good else f": {tokens} alone {solo_tokens} "
               f"want {case['new_ids']} ({finish})"))

    selections = batch.expert_selections()
    totals = [sum(layer) for layer in selections]
    good = (len(selections) > 0 and
            all(t == 2 * stats["rows"] for t in totals))
    ok &= good
    print(("ok" if good else "FAIL") +
          f" expert selections: {len(selections)} layers, totals {totals} "
          f"for {stats['rows']} rows at top-2")

    cancelling = moert.BatchGenerator(plan, slots=4, threads=1,
                                      keep_logits=True)
    requests = [(c["prompt"], len(c["new_ids"])) for c in cases]
    results = run(cancelling, requests, cancel=1)
    good = results[1][2] == "cancelled" and len(results[1][0]) < 24
    for k, (tokens, _, finish) in enumerate(results):
        if k != 1:
            good &= tokens == cases[k]["new_ids"] and finish == "length"
    good &= cancelling.slots_in_use == 0 and not cancelling.has_work
    ok &= good
    print(("ok" if good else "FAIL") +
          f" cancel: sequence 1 ended after {len(results[1][0])} ids "
          f"({results[1][2]}), the others drew their ids")

    if serial_path:
        ok &= check_serial(serial_path, serial_reference)

    try:
        batch.add([3, 500], max_new_tokens=2)
        ok = False
        print("FAIL no error for an id outside the vocabulary")
    except ValueError as e:
        print(f"ok ValueError: {e}")
    print("batch generate: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
