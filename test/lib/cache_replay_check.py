#!/usr/bin/env python3
"""The expert cache replay counts the runtime's hits: tiered generation
runs' per-layer hits and misses (prefill and decode, `moe-run --stats`'
lines) against bench/expert_cache_replay.py on the routing of each run.

    cache_replay_check.py GEN.plan --workdir DIR
        (--prompt-ids 3,14,15 | --prompts FILE) [--temperature T]
        --max-new-tokens N --policies static,lru,... --budgets 250K,300K
        [--want IDS.txt]

Runs `moe-run GEN.plan --prompt-ids ... --device-memory B --expert-cache
POLICY --trace T --stats S` for each policy and budget (one device, no
reads ahead; a plan compiled without a routing profile: ranks by expert,
then layer). The routing comes from the trace (bench/record_routing.py
--from-trace), the cache's size in experts from the stats (capacity bytes
over one expert's); the trace holds at most 100 decode steps (moe-run
keeps the last 100 runs of a session), so the runs must be no longer.
With --want, every run's printed ids must equal that file. Prints `replay matches: ...` per run, or each difference (exit 1).
"""

import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "bench"))
import expert_cache_replay  # noqa: E402
import record_routing  # noqa: E402


def runtime_counts(stderr):
    """{kind: (hits per layer, misses per layer)} from moe-run's lines."""
    counts = {}
    pattern = re.compile(r"moe-run: (prefill|decode) \S+: (\d+) hits, "
                         r"(\d+) misses")
    with open(stderr) as f:
        for line in f:
            m = pattern.match(line)
            if m:
                hits, misses = counts.setdefault(m.group(1), ([], []))
                hits.append(int(m.group(2)))
                misses.append(int(m.group(3)))
    return counts


def check(trace_path, stats_path, stderr_path, policy):
    """The replay's counts against the run's; a line saying so."""
    trace = record_routing.from_moe_run_trace(trace_path)
    with open(stats_path) as f:
        stats = json.load(f)
    cache = stats["expert_cache"]
    if cache["policy"] != policy:
        return False, f"the run's policy is {cache['policy']}, not {policy}"
    layers = [l["expert_cache"] for l in stats["moe_layers"]]
    expert = next(l["bytes_paged_in"] // l["misses"] for l in layers
                  if l["misses"])
    capacity = cache["capacity_bytes"] // expert
    kind, fraction = expert_cache_replay.parse_policy(policy)
    per_token = sum(min(trace["top_k"], n) for n in trace["experts"])
    ranked = expert_cache_replay.rank(trace, profile=False)
    replayed = expert_cache_replay.replay(
        trace, capacity, fraction, kind, ranked, 32.0 * per_token,
        32 * per_token, all_steps=True)
    want = runtime_counts(stderr_path)
    got = {k: (h, [n - x for n, x in zip(l, h)])
           for k, (h, l) in replayed.items()}
    diffs = [f"{policy} {k}: moe-run (hits, misses per layer) "
             f"{want.get(k)}, replay {got.get(k)}"
             for k in sorted(set(want) | set(got))
             if want.get(k) != got.get(k)]
    if diffs:
        return False, "\n".join(diffs)
    hits = sum(sum(h) for h, _ in got.values())
    misses = sum(sum(m) for _, m in got.values())
    return True, (f"replay matches: {policy}, {capacity} experts of cache, "
                  f"{hits} hits, {misses} misses")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan")
    p.add_argument("--workdir", required=True)
    p.add_argument("--prompt-ids")
    p.add_argument("--prompts", help="a prompts file (moe-run --prompts)")
    p.add_argument("--temperature", default="0")
    p.add_argument("--max-new-tokens", default="24")
    p.add_argument("--policies", required=True)
    p.add_argument("--budgets", required=True)
    p.add_argument("--want")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    want = open(args.want).read() if args.want else None
    ok = True
    for policy in args.policies.split(","):
        for budget in args.budgets.split(","):
            base = os.path.join(args.workdir,
                                f"{policy.replace(':', '_')}.{budget}")
            prompt = (["--prompts", args.prompts] if args.prompts else
                      ["--prompt-ids", args.prompt_ids])
            cmd = ["moe-run", args.plan] + prompt + [
                   "--max-new-tokens", args.max_new_tokens,
                   "--temperature", args.temperature, "--seed", "3",
                   "--device-memory", budget, "--expert-cache", policy,
                   "--trace", base + ".trace.json",
                   "--stats", base + ".json"]
            run = subprocess.run(cmd, capture_output=True, text=True)
            with open(base + ".err", "w") as f:
                f.write(run.stderr)
            if run.returncode:
                sys.exit(f"{' '.join(cmd)} failed:\n{run.stderr}")
            if want is not None and run.stdout != want:
                ok = False
                print(f"{policy} at {budget}: ids differ from {args.want}")
            good, line = check(base + ".trace.json", base + ".json",
                               base + ".err", policy)
            ok = ok and good
            print(f"{budget}: {line}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
