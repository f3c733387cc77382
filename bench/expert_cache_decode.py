#!/usr/bin/env python3
"""Decode speed of a tiered generation plan per expert cache policy (issue 33
step 4).

    python3 bench/expert_cache_decode.py PLAN --device-memory 275K
        [--policies static,lru,lfu,adaptive,lru:0.5,lfu:0.5,adaptive:0.5]
        [--rounds 5]
        [--bench 20] [--prompt-tokens 6] [--max-new-tokens 56] [--threads 1]
        [--moe-run NAME=PATH,NAME=PATH]

Runs `moe-run PLAN --bench N --prompt-tokens P --max-new-tokens G
--device-memory B --expert-cache POLICY --stats` for each policy in turns,
--rounds times (the machine is shared: the policies alternate so that load
falls on all of them alike), and prints per policy the median decode
tokens/s (each round's the mean over --bench repetitions), its ratio to
the first policy's, the decode layers' hit rate (warm-up included), and the
load average before each round. With several moe-run binaries (--moe-run
old=A,new=B) each policy runs on each, in turns, compared with the first.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan")
    p.add_argument("--device-memory", required=True)
    p.add_argument("--policies",
                   default="static,lru,lfu,adaptive,lru:0.5,lfu:0.5,"
                   "adaptive:0.5")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--bench", type=int, default=20)
    p.add_argument("--prompt-tokens", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=56)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--moe-run", default=os.path.join(ROOT, "build", "bin",
                                                     "moe-run"))
    args = p.parse_args()
    binaries = {"": args.moe_run}
    if "=" in args.moe_run:
        binaries = dict(b.split("=", 1) for b in args.moe_run.split(","))
    policies = [(q, name) for q in args.policies.split(",")
                for name in binaries]
    rates = {q: [] for q in policies}
    hits = {q: [] for q in policies}
    loads = []
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for q in policies:
                stats = os.path.join(work, "stats.json")
                cmd = [binaries[q[1]], args.plan, "--bench", str(args.bench),
                       "--prompt-tokens", str(args.prompt_tokens),
                       "--max-new-tokens", str(args.max_new_tokens),
                       "--threads", str(args.threads),
                       "--device-memory", args.device_memory,
                       "--expert-cache", q[0], "--stats", stats]
                run = subprocess.run(cmd, capture_output=True, text=True)
                if run.returncode:
                    sys.exit(f"{' '.join(cmd)} failed:\n{run.stderr}")
                with open(stats) as f:
                    s = json.load(f)
                rates[q].append(s["decode_tokens_per_s"]["mean"])
                layers = [l["expert_cache"] for l in s["moe_layers"]]
                h = sum(l["hits"] for l in layers)
                n = h + sum(l["misses"] for l in layers)
                hits[q].append(h / n if n else 0.0)
    base = statistics.median(rates[policies[0]])
    print(f"load average (1 min) before each round: "
          + ", ".join(f"{x:.2f}" for x in loads))
    name = lambda q: f"{q[0]} ({q[1]})" if q[1] else q[0]
    print("| policy | decode tokens/s (median) | vs " + name(policies[0]) +
          " | each round | decode hit rate |")
    print("|---|---|---|---|---|")
    for q in policies:
        m = statistics.median(rates[q])
        print(f"| {name(q)} | {m:.1f} | {m / base:.2f} | "
              + " / ".join(f"{x:.0f}" for x in rates[q])
              + f" | {statistics.median(hits[q]):.3f} |")


if __name__ == "__main__":
    main()
