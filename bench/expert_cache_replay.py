#!/usr/bin/env python3
"""Expert cache policies replayed on routing traces (issue 33 step 4).

    python3 bench/expert_cache_replay.py [--trace trace.json]
        [--synthetic --layers 24 --experts 64 --top-k 4 --tokens 4000
         --skew 1.0 --drift 0.0 --seed 0]
        [--budgets 0.125,0.25,0.5] [--fractions 0.25,0.5,0.75]
        [--half-life 32] [--json out.json]

A trace is, per token in order, per MoE layer, the experts the token
selected (JSON: {"top_k": k, "experts": [E per layer], "tokens": [[[e, ...]
per layer] per token]}; bench/record_routing.py writes one from a
generation run). `--synthetic` draws one instead: per layer a Zipf
law of exponent --skew over a seeded permutation of the experts, each token
taking k distinct experts from it; with --drift p, every 64 tokens each
layer's permutation swaps a fraction p of its ranks (a topic that shifts).

Every policy holds a budget of B experts (counted over all layers, as the
runtime's `--device-memory` is) and is replayed as the runtime's expert
store works: per token and layer, the selected experts are locked, hits
are counted, misses inserted by evicting unlocked, unpinned entries. The
hit rate is counted on the trace's second half; the first half is the
profile (the static rank, as `moe-run --stats` gives `moec compile
--routing-profile`) and the adaptive caches' warm-up.

  static     the runtime's default: the B - k most loaded experts of the
             profile pinned, an LRU of k (one layer's selection) for the rest
  lru        all of B an LRU of recent experts
  lfu        all of B least-frequently-used with exponential decay (a use
             weighs 2^(-age / half-life), age in tokens)
  lru:F      the split: F of the static hot set pinned, the rest of B an LRU
  lfu:F      the same with the decaying LFU
(the names of `moe-run --expert-cache`).

Prints one table row per budget, the hit rate of each policy (and per layer
with --per-layer).
"""

import argparse
import collections
import heapq
import json
import random
import sys


def zipf_trace(layers, experts, top_k, tokens, skew, drift, seed):
    rng = random.Random(seed)
    weights = [1.0 / (r + 1) ** skew for r in range(experts)]
    perms = [rng.sample(range(experts), experts) for _ in range(layers)]
    out = []
    for t in range(tokens):
        if drift and t and t % 64 == 0:
            for perm in perms:
                for _ in range(max(1, int(drift * experts / 2))):
                    a, b = rng.randrange(experts), rng.randrange(experts)
                    perm[a], perm[b] = perm[b], perm[a]
        token = []
        for perm in perms:
            chosen = []
            while len(chosen) < top_k:
                e = perm[rng.choices(range(experts), weights)[0]]
                if e not in chosen:
                    chosen.append(e)
            token.append(chosen)
        out.append(token)
    return {"top_k": top_k, "experts": [experts] * layers, "tokens": out}


class Cache:
    """A budget of `capacity` experts: `pinned` keys never leave; the rest is
    an LRU (`half_life` None) or a decaying LFU."""

    def __init__(self, capacity, pinned, half_life=None):
        self.capacity = capacity
        self.pinned = set(pinned)
        assert len(self.pinned) <= capacity
        self.lru = collections.OrderedDict()
        self.half_life = half_life
        self.score = {}
        self.heap = []
        self.scale = 1.0

    def request(self, keys, now):
        """Locks `keys` (one layer's selection of one token); returns the
        number of hits."""
        hits = 0
        for key in keys:
            if key in self.pinned:
                hits += 1
                continue
            if self.half_life is None:
                if key in self.lru:
                    hits += 1
                    self.lru.move_to_end(key)
                else:
                    self.evict(keys)
                    self.lru[key] = True
            else:
                if key in self.lru:
                    hits += 1
                else:
                    self.evict(keys)
                    self.lru[key] = True
                self.touch(key, now)
        return hits

    def touch(self, key, now):
        # A use at time t weighs 2^(t / half_life); relative order is that
        # of the decayed sums. Rescale before the weights overflow.
        weight = 2.0 ** (now / self.half_life) / self.scale
        if weight > 1e200:
            self.scale *= weight
            self.score = {k: v / weight for k, v in self.score.items()}
            self.heap = [(v, k) for k, v in self.score.items() if k in self.lru]
            heapq.heapify(self.heap)
            weight = 1.0
        self.score[key] = self.score.get(key, 0.0) + weight
        if key in self.lru:
            heapq.heappush(self.heap, (self.score[key], key))

    def evict(self, locked):
        while len(self.pinned) + len(self.lru) >= self.capacity:
            if self.half_life is None:
                victim = next(k for k in self.lru if k not in locked)
            else:
                kept = []
                while True:
                    score, victim = heapq.heappop(self.heap)
                    if victim in self.lru and self.score[victim] == score:
                        if victim not in locked:
                            break
                        kept.append((score, victim))
                for item in kept:
                    heapq.heappush(self.heap, item)
            del self.lru[victim]


def replay(trace, budget, pinned_count, ranked, half_life=None):
    """Hit rate over the second half (total and per layer)."""
    cache = Cache(budget, ranked[:pinned_count], half_life)
    tokens = trace["tokens"]
    half = len(tokens) // 2
    layers = len(trace["experts"])
    hits = [0] * layers
    lookups = [0] * layers
    for t, token in enumerate(tokens):
        for layer, chosen in enumerate(token):
            keys = [(layer, e) for e in dict.fromkeys(chosen)]
            h = cache.request(keys, t)
            if t >= half:
                hits[layer] += h
                lookups[layer] += len(keys)
    return sum(hits) / max(1, sum(lookups)), [
        h / max(1, n) for h, n in zip(hits, lookups)
    ]


def profile_rank(trace):
    """The experts by load over the first half, most loaded first (ties:
    lower expert, then lower layer, as runtime/format/tier_assignment.cpp)."""
    tokens = trace["tokens"]
    load = collections.Counter()
    for token in tokens[: len(tokens) // 2]:
        for layer, chosen in enumerate(token):
            for e in set(chosen):
                load[(layer, e)] += 1
    keys = [(l, e) for l, n in enumerate(trace["experts"]) for e in range(n)]
    return sorted(keys, key=lambda k: (-load[k], k[1], k[0]))


def policies(fractions, half_life):
    out = [("static", 1.0, None), ("lru", 0.0, None), ("lfu", 0.0, half_life)]
    out += [(f"lru:{f:g}", f, None) for f in fractions]
    out += [(f"lfu:{f:g}", f, half_life) for f in fractions]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace")
    p.add_argument("--synthetic", action="store_true")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--tokens", type=int, default=4000)
    p.add_argument("--skew", type=float, default=1.0)
    p.add_argument("--drift", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budgets", default="0.125,0.25,0.5",
                   help="fractions of all experts (or, above 1, counts)")
    p.add_argument("--fractions", default="0.25,0.5,0.75")
    p.add_argument("--half-life", type=float, default=32)
    p.add_argument("--per-layer", action="store_true")
    p.add_argument("--json")
    args = p.parse_args()
    if bool(args.trace) == args.synthetic:
        sys.exit("give --trace FILE or --synthetic")
    if args.trace:
        with open(args.trace) as f:
            trace = json.load(f)
    else:
        trace = zipf_trace(args.layers, args.experts, args.top_k, args.tokens,
                           args.skew, args.drift, args.seed)
    total = sum(trace["experts"])
    top_k = trace["top_k"]
    ranked = profile_rank(trace)
    fractions = [float(f) for f in args.fractions.split(",") if f]
    chosen = policies(fractions, args.half_life)
    print(f"trace: {len(trace['tokens'])} tokens, {len(trace['experts'])} "
          f"layers, {total} experts, top-{top_k}")
    print("| budget (experts) | " + " | ".join(n for n, _, _ in chosen) + " |")
    print("|---" * (len(chosen) + 1) + "|")
    results = []
    for b in args.budgets.split(","):
        b = float(b)
        budget = int(b) if b > 1 else max(top_k, round(b * total))
        budget = max(budget, top_k)
        row = []
        for name, fraction, half_life in chosen:
            # The static hot set leaves the cache its least size: one
            # layer's top-k. Fractions of it are pinned by the splits.
            pinned = int(fraction * max(0, min(budget, total) - top_k))
            if budget >= total:
                pinned = total if name == "static" else pinned
            rate, per_layer = replay(trace, budget, pinned, ranked, half_life)
            row.append(rate)
            results.append({"budget": budget, "policy": name,
                            "pinned": pinned, "hit_rate": rate,
                            "per_layer": per_layer})
            if args.per_layer:
                print(f"  {name} B={budget}: " +
                      " ".join(f"{r:.2f}" for r in per_layer))
        label = f"{budget} ({budget / total:.1%})"
        print(f"| {label} | " + " | ".join(f"{r:.3f}" for r in row) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
