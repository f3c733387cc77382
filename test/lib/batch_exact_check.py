#!/usr/bin/env python3
"""Batched f32 decoding equal to each sequence alone, bit for bit.

  batch_exact_check.py PLAN [SEQUENCES] [THREADS]

(`import moert` from PYTHONPATH.) On an f32 generation plan, SEQUENCES (at
most 8, default 8) one-token prompts decode 12 new ids each together on a
moert.BatchGenerator, and each alone. Where the CPU has AVX-512, every
product of at most 8 rows (the Linear and Experts steps, and Gemms by a
transposed matrix such as routers) sums each row in one order whatever the
rows beside it (runtime/src/kernels/tiles.h), so each sequence's logits
must equal its logits alone exactly, in the default kernels, not only in
batch-invariant mode. Exit 0 when they do.
"""

import sys

import numpy as np

import moert

PROMPTS = [[3], [14], [15], [9], [26], [5], [35], [8]]
NEW_IDS = 12


def decode(batch, prompts):
    """Adds `prompts` and steps until done: per prompt, its ids and logits."""
    ids = [batch.add(p, max_new_tokens=NEW_IDS) for p in prompts]
    out = {i: ([], []) for i in ids}
    while batch.has_work:
        for sid, token, finish in batch.step():
            tokens, rows = out[sid]
            if token >= 0:
                tokens.append(token)
                if finish is None:
                    rows.append(batch.last_logits(sid).copy())
    return [out[i] for i in ids]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    plan = moert.Plan(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    prompts = PROMPTS[:count]
    alone = [decode(moert.BatchGenerator(plan, slots=1, threads=threads,
                                         keep_logits=True), [p])[0]
             for p in prompts]
    batch = moert.BatchGenerator(plan, slots=count, threads=threads,
                                 keep_logits=True)
    together = decode(batch, prompts)
    ok = True
    for k, ((ids, rows), (solo_ids, solo_rows)) in enumerate(
            zip(together, alone)):
        worst = max(float(np.abs(a - b).max())
                    for a, b in zip(rows, solo_rows))
        good = ids == solo_ids and len(rows) == len(solo_rows) and worst == 0
        ok &= good
        print(("ok" if good else "FAIL") + f" sequence {k}: {len(ids)} ids, "
              f"logits {worst:.1e} from alone")
    print(f"batch exact: {count} sequences, {threads} thread(s): " +
          ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
