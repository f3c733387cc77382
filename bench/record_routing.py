#!/usr/bin/env python3
"""Records a per-token routing trace from a generation run (issue 33 step 4),
for bench/expert_cache_replay.py.

    PYTHONPATH=build/python python3 bench/record_routing.py PLAN -o trace.json
        [--sequences 40] [--prompt-len 6] [--max-new-tokens 24]
        [--temperature 0.8] [--seed 0]

PLAN is a generation plan (moec compile DECODE --prefill PREFILL --max-seq
S). The sequences run one after another, one slot, each a seeded random
prompt sampled at --temperature (0: greedy). After each decode step,
`BatchGenerator.expert_selections()` (per MoE layer, per expert, the rows
routed to it since creation) less its value before the step is the step's
one token's experts per layer. Prefill steps route a whole prompt at once
and are left out of the trace: it holds the decode tokens, in order.

    python3 bench/record_routing.py --from-trace RUN.trace.json -o trace.json

converts a `moe-run --trace` of a generation run on one device instead:
every run of the prefill and the decode, in order, each MoE layer's
experts with rows (its Router's tokens per expert), the prefill runs' steps
listed under "prefill" (what test/E2E/tiered-cache-replay.test replays).
"""

import argparse
import json
import random
import sys


def from_moe_run_trace(path):
    """The routing of a moe-run --trace (Chrome trace events): per run of
    the prefill (thread 'prefill') and the decode, in time order, per MoE
    layer its experts with rows."""
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    routers = sorted((e for e in events if e.get("cat") == "moe"
                      and e.get("name", "").endswith(" router")),
                     key=lambda e: e["ts"])
    if len({e["pid"] for e in routers}) > 1:
        sys.exit(f"{path}: routers of several devices; give a trace of one")
    layers = {}
    top_k = 0  # the Router's selections per token: its outputs' last dim
    steps = []  # [(thread, run), {layer: experts}]
    for e in routers:
        layer = int(e["name"].split()[1])
        counts = e["args"]["tokens_per_expert"]
        layers[layer] = len(counts)
        top_k = max(top_k, int(e["args"]["outputs"][0].strip("[]")
                               .split(",")[-1]))
        run = (threads.get((e["pid"], e["tid"]), ""), e["args"]["run"])
        if not steps or steps[-1][0] != run or layer in steps[-1][1]:
            steps.append((run, {}))
        steps[-1][1][layer] = [x for x, n in enumerate(counts) if n]
    n = max(layers) + 1 if layers else 0
    tokens = [[step.get(l, []) for l in range(n)] for _, step in steps]
    prefill = [i for i, (run, _) in enumerate(steps) if run[0] == "prefill"]
    return {"top_k": top_k, "experts": [layers.get(l, 0) for l in range(n)],
            "tokens": tokens, "prefill": prefill, "source": {"trace": path}}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan", nargs="?")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--from-trace")
    p.add_argument("--sequences", type=int, default=40)
    p.add_argument("--prompt-len", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    if args.from_trace:
        trace = from_moe_run_trace(args.from_trace)
        with open(args.output, "w") as f:
            json.dump(trace, f)
        print(f"record_routing: {len(trace['tokens'])} steps "
              f"({len(trace['prefill'])} of them prefill), "
              f"{len(trace['experts'])} MoE layers")
        return
    if not args.plan:
        sys.exit("give a generation plan or --from-trace")
    import moert

    plan = moert.Plan(args.plan)
    batch = moert.BatchGenerator(plan, slots=1, threads=args.threads)
    rng = random.Random(args.seed)
    vocab = batch.vocab_size
    before = batch.expert_selections()
    experts = [len(layer) for layer in before]
    top_k = None
    tokens = []
    for s in range(args.sequences):
        prompt = [rng.randrange(vocab) for _ in range(args.prompt_len)]
        batch.add(prompt, max_new_tokens=args.max_new_tokens,
                  temperature=args.temperature, seed=args.seed * 1000 + s)
        first = True
        while batch.has_work:
            batch.step()
            after = batch.expert_selections()
            rows = [[a - b for a, b in zip(la, lb)]
                    for la, lb in zip(after, before)]
            before = after
            if first:  # the prompt's prefill
                first = False
                continue
            token = [[e for e, n in enumerate(layer) if n] for layer in rows]
            if any(sum(layer) != 1 * len(token[i]) for i, layer in
                   enumerate(rows)):
                sys.exit("a decode step routed more than one row")
            if not any(token):
                continue
            k = max(len(t) for t in token)
            top_k = max(top_k or 0, k)
            tokens.append(token)
    with open(args.output, "w") as f:
        json.dump({"top_k": top_k, "experts": experts, "tokens": tokens,
                   "source": {"plan": args.plan, "sequences": args.sequences,
                              "temperature": args.temperature,
                              "seed": args.seed}}, f)
    print(f"record_routing: {len(tokens)} decode tokens, {len(experts)} MoE "
          f"layers of {experts} experts, top-{top_k}")


if __name__ == "__main__":
    main()
