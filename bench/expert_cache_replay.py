#!/usr/bin/env python3
"""Expert cache policies replayed on routing traces (issue 33 step 4).

    python3 bench/expert_cache_replay.py [--trace trace.json]
        [--synthetic --layers 24 --experts 64 --top-k 4 --tokens 4000
         --skew 1.0 --drift 0.0 --seed 0]
        [--budgets 0.125,0.25,0.5] [--fractions 0.25,0.5,0.75]
        [--policies static,lru,lfu,adaptive,...] [--per-layer]
        [--all-steps --ranks default] [--json out.json]

A trace is, per step in order, per MoE layer, the experts the step
selected (JSON: {"top_k": k, "experts": [E per layer], "tokens": [[[e, ...]
per layer] per step], optional "prefill": [indices of prefill steps]});
bench/record_routing.py writes one from a generation run (decode tokens
only) or from a `moe-run --trace` (prefill steps too). `--synthetic` draws
one instead: per layer a Zipf law of exponent --skew over a seeded
permutation of the experts, each token taking k distinct experts from it;
with --drift p, every 64 tokens each layer's permutation swaps a fraction
p of its ranks (a topic that shifts).

The replay is the runtime's cache (runtime/src/tiers/expert_cache.cpp)
and its use by the expert store (ExpertStore::acquire, without reads
ahead), step by step, so that it counts the hits `moe-run --stats` counts
(test/E2E/tiered-cache-replay.test checks it). A budget of B experts over
all layers (all experts of one size) leaves B - k cold-cache slots' worth
of hot experts (the plan's lowest ranks: --ranks profile, the load over
the trace's first half as `moec compile --routing-profile` ranks, or
default, expert then layer as a plan without a profile); a policy's share
F of them is pinned and the rest start in the cache, inserted from the
highest rank down. Each step's layer looks up its experts (ascending),
locks the hits, inserts the misses by evicting unlocked, unpinned entries
(those that do not fit wait for the next round, as the Experts kernel
does), then unlocks them.

  static       every hot expert pinned, an LRU of the rest of B (k experts)
  lru[:F]      F of the hot set pinned (default 0), the rest of B an LRU
  lfu[:F]      ... a decaying LFU: each lookup of an expert adds 2^(t / h)
               to its score (t the lookup's number, h the half-life: 32
               tokens' lookups, every layer's top-k), the least scored
               evicted (ties: least recently used)
  adaptive[:F] ... shadow directories (keys only) of an LRU, of the LFU
               and of a slow LFU (half-life 32 times as long) of the same
               size replay every lookup; their hits, averaged over the
               last 32 tokens' lookups, choose whose victim the cache
               evicts (docs/tiered-experts.md)

The hit rate is counted on the trace's second half (the first half is the
profile and the adaptive caches' warm-up), or with --all-steps on every
step, per step kind (prefill, decode). Prints one table row per budget.
"""

import argparse
import collections
import heapq
import json
import math
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


# Scores are rescaled by 2^-RESCALE once a weight would pass 2^RESCALE
# (runtime: ExpertCache::kRescale).
RESCALE = 256


class Scores:
    """Decayed use scores of every key looked up: a lookup at clock c adds
    2^((c - base) / half_life); as ExpertCache's."""

    def __init__(self, half_life):
        self.half_life = half_life
        self.base = 0.0
        self.score = {}

    def use(self, key, clock):
        if (clock - self.base) / self.half_life > RESCALE:
            scale = 2.0 ** -RESCALE
            self.score = {k: v * scale for k, v in self.score.items()}
            self.base += RESCALE * self.half_life
            return True
        return False

    def add(self, key, clock):
        rescaled = self.use(key, clock)
        w = math.exp2((clock - self.base) / self.half_life)
        self.score[key] = self.score.get(key, 0.0) + w
        return rescaled


class LfuHeap:
    """The keys of a set by (score, tick), least first, with lazy removal."""

    def __init__(self, scores, ticks, members):
        self.scores, self.ticks, self.members = scores, ticks, members
        self.heap = []

    def push(self, key):
        heapq.heappush(self.heap, (self.scores.score.get(key, 0.0),
                                   self.ticks[key], key))

    def rebuild(self):
        self.heap = []
        for key in self.members:
            self.push(key)

    def pop_least(self, skip):
        """The least (score, tick) member not in `skip`."""
        kept = []
        victim = None
        while self.heap:
            item = heapq.heappop(self.heap)
            score, tick, key = item
            if (key not in self.members or self.ticks[key] != tick
                    or self.scores.score.get(key, 0.0) != score):
                continue
            if key in skip:
                kept.append(item)
                continue
            victim = key
            break
        for item in kept:
            heapq.heappush(self.heap, item)
        return victim


# The slow LFU's half-life over the LFU's (ExpertCache::kSlowHalfLives).
SLOW_HALF_LIVES = 32


class Cache:
    """ExpertCache with capacity in experts: entries in recency order
    (oldest first), pinned ones never evicted, locked ones not while
    locked. kind: lru, lfu or adaptive. Candidates (shadows, merits,
    leaders): 0 the LRU, 1 the LFU, 2 the slow LFU."""

    def __init__(self, capacity, kind, half_life, window):
        self.capacity = capacity
        self.kind = kind
        # Unpinned entries, oldest first (where pinned ones stand in the
        # runtime's order never changes a victim), and the pinned ones.
        self.entries = collections.OrderedDict()
        self.pinned_keys = set()
        self.locks = {}
        self.pinned = 0
        self.clock = 0
        self.tick = 0
        self.ticks = {}
        mults = [1, SLOW_HALF_LIVES] if kind == "adaptive" else [1]
        self.scores = ([Scores(half_life * m) for m in mults]
                       if kind != "lru" else [])
        self.heaps = [LfuHeap(sc, self.ticks, self.entries)
                      for sc in self.scores]
        self.window = window
        self.shadow_lru = collections.OrderedDict()
        n = len(self.scores)
        self.shadow_lfu = [dict() for _ in range(n)]
        self.shadow_ticks = [dict() for _ in range(n)]
        self.shadow_heap = [LfuHeap(self.scores[j], self.shadow_ticks[j],
                                    self.shadow_lfu[j]) for j in range(n)]
        self.merit = [0] * (n + 1)  # fixed point, 1 << 16 a hit
        self.group = []

    def leader(self):
        """Whose victims an insertion evicts: the candidate of most hits
        lately (ties: the lower)."""
        if self.kind == "adaptive":
            best = 0
            for i, m in enumerate(self.merit):
                if m > self.merit[best]:
                    best = i
            return best
        return 1 if self.kind == "lfu" else 0

    def find(self, key):
        self.clock += 1
        for j, sc in enumerate(self.scores):
            if sc.add(key, self.clock):
                self.heaps[j].rebuild()
                self.shadow_heap[j].rebuild()
        if key in self.pinned_keys:
            return True
        if self.kind == "adaptive":
            self.shadow(key)
        if key not in self.entries:
            return False
        self.entries.move_to_end(key)
        self.tick += 1
        self.ticks[key] = self.tick
        for h in self.heaps:
            h.push(key)
        return True

    def shadow(self, key):
        """A lookup in the shadow directories: hits counted and refreshed,
        misses inserted by end_lookups()."""
        hits = [key in self.shadow_lru] + [key in d for d in self.shadow_lfu]
        for i in range(len(hits)):
            self.merit[i] += (hits[i] << 16) - self.merit[i] // self.window
        if hits[0]:
            self.shadow_lru.move_to_end(key)
        for j in range(len(self.shadow_lfu)):
            if hits[j + 1]:
                self.shadow_ticks[j][key] = self.clock
                self.shadow_heap[j].push(key)
        self.group.append((key, hits, self.clock))

    def end_lookups(self):
        """The lookups since the last call were one step's: the shadows
        insert their misses, evicting keys of the group last (locked in
        the cache)."""
        group = {key for key, _, _ in self.group}
        room = self.capacity - self.pinned
        for key, hits, at in self.group:
            if not hits[0]:
                while len(self.shadow_lru) >= room:
                    victim = next((k for k in self.shadow_lru
                                   if k not in group), None)
                    if victim is None:
                        break
                    del self.shadow_lru[victim]
                if len(self.shadow_lru) < room:
                    self.shadow_lru[key] = True
            for j in range(len(self.shadow_lfu)):
                if hits[j + 1]:
                    continue
                d = self.shadow_lfu[j]
                while len(d) >= room:
                    victim = self.shadow_heap[j].pop_least(group)
                    if victim is None:
                        break
                    del d[victim]
                if len(d) < room:
                    d[key] = True
                    self.shadow_ticks[j][key] = at
                    self.shadow_heap[j].push(key)
        self.group = []

    def insert(self, key, pinned):
        """Inserts `key` as the newest, evicting until it fits; False (and
        nothing evicted) when it cannot fit."""
        size = len(self.entries) + len(self.pinned_keys)
        locked = sum(1 for k in self.locks if k in self.entries)
        if size - (len(self.entries) - locked) + 1 > self.capacity:
            return False
        lead = self.leader()
        while len(self.entries) + len(self.pinned_keys) + 1 > self.capacity:
            if lead > 0:
                victim = self.heaps[lead - 1].pop_least(self.locks)
            else:
                victim = next(k for k in self.entries if k not in self.locks)
            del self.entries[victim]
        self.tick += 1
        if pinned:
            self.pinned_keys.add(key)
            self.pinned += 1
            return True
        self.entries[key] = True
        self.ticks[key] = self.tick
        for h in self.heaps:
            h.push(key)
        return True


def acquire(cache, layer, pending):
    """ExpertStore::acquire: (batch, left, hits, misses)."""
    batch, misses, left = [], [], []
    hits = 0
    for e in pending:
        if cache.find((layer, e)):
            cache.locks[(layer, e)] = cache.locks.get((layer, e), 0) + 1
            batch.append(e)
            hits += 1
        else:
            misses.append(e)
    cache.end_lookups()
    n = 0
    for e in misses:
        if not cache.insert((layer, e), False):
            left.append(e)
            continue
        cache.locks[(layer, e)] = cache.locks.get((layer, e), 0) + 1
        batch.append(e)
        n += 1
    return batch, left, hits, n


def replay(trace, budget, fraction, kind, ranked, half_life, window,
           all_steps=False):
    """Hits and lookups per step kind and layer: {kind: ([hits], [n])}."""
    layers = len(trace["experts"])
    total = sum(trace["experts"])
    top_k = trace["top_k"]
    # The hot set: what leaves the cold cache one layer's top-k (all when
    # every expert fits); F of it pinned, lowest ranks first.
    hot = ranked if budget >= total else ranked[:max(0, budget - top_k)]
    pinned = len(hot) if kind == "static" else int(fraction * len(hot))
    cache = Cache(budget, "lru" if kind == "static" else kind,
                  half_life, window)
    for i in range(len(hot) - 1, -1, -1):
        cache.insert(hot[i], i < pinned)
    tokens = trace["tokens"]
    prefill = set(trace.get("prefill", []))
    half = 0 if all_steps else len(tokens) // 2
    counts = {}
    for t, step in enumerate(tokens):
        kind_of = "prefill" if t in prefill else "decode"
        hits, lookups = counts.setdefault(kind_of,
                                          ([0] * layers, [0] * layers))
        for layer, chosen in enumerate(step):
            pending = sorted(set(chosen))
            while pending:
                batch, pending, h, m = acquire(cache, layer, pending)
                if not batch:
                    sys.exit(f"step {t} layer {layer}: no room for an expert")
                for e in batch:
                    cache.locks[(layer, e)] -= 1
                    if not cache.locks[(layer, e)]:
                        del cache.locks[(layer, e)]
                if t >= half:
                    hits[layer] += h
                    lookups[layer] += h + m
    return counts


def rank(trace, profile):
    """The experts by load over the first half, most loaded first (ties:
    lower expert, then lower layer, as runtime/format/tier_assignment.cpp);
    with profile False, that order alone (a plan compiled without one)."""
    tokens = trace["tokens"]
    load = collections.Counter()
    if profile:
        for token in tokens[: len(tokens) // 2]:
            for layer, chosen in enumerate(token):
                for e in set(chosen):
                    load[(layer, e)] += 1
    keys = [(l, e) for l, n in enumerate(trace["experts"]) for e in range(n)]
    return sorted(keys, key=lambda k: (-load[k], k[1], k[0]))


def parse_policy(text):
    kind, _, f = text.partition(":")
    if kind not in ("static", "lru", "lfu", "adaptive") or (
            kind == "static" and f):
        sys.exit(f"unknown policy '{text}'")
    return kind, float(f) if f else (1.0 if kind == "static" else 0.0)


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
    p.add_argument("--fractions", default="0.5",
                   help="the pinned shares of lru:F, lfu:F, adaptive:F")
    p.add_argument("--policies",
                   help="comma-separated (default: static, lru, lfu, "
                   "adaptive and each with --fractions)")
    p.add_argument("--half-life", type=float, default=32,
                   help="of the LFU scores, in tokens' lookups")
    p.add_argument("--window", type=float, default=32,
                   help="of the adaptive cache's shadow hits, in tokens' "
                   "lookups")
    p.add_argument("--ranks", choices=["profile", "default"],
                   default="profile")
    p.add_argument("--all-steps", action="store_true",
                   help="count every step, per kind (prefill, decode)")
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
    ranked = rank(trace, args.ranks == "profile")
    # One token's lookups: every layer's top-k (ExpertStore::create).
    per_token = sum(min(top_k, n) for n in trace["experts"])
    half_life = args.half_life * per_token
    window = max(1, int(args.window * per_token))
    if args.policies:
        chosen = args.policies.split(",")
    else:
        fractions = [f for f in args.fractions.split(",") if f]
        chosen = ["static", "lru", "lfu", "adaptive"]
        chosen += [f"{k}:{f}" for k in ("lru", "lfu", "adaptive")
                   for f in fractions]
    print(f"trace: {len(trace['tokens'])} steps, {len(trace['experts'])} "
          f"layers, {total} experts, top-{top_k}")
    print("| budget (experts) | " + " | ".join(chosen) + " |")
    print("|---" * (len(chosen) + 1) + "|")
    results = []
    for b in args.budgets.split(","):
        b = float(b)
        budget = int(b) if b > 1 else max(top_k, round(b * total))
        budget = max(budget, top_k)
        row = []
        for name in chosen:
            kind, fraction = parse_policy(name)
            counts = replay(trace, budget, fraction, kind, ranked, half_life,
                            window, args.all_steps)
            hits = sum(sum(h) for h, _ in counts.values())
            n = sum(sum(l) for _, l in counts.values())
            rate = hits / max(1, n)
            row.append(rate)
            results.append({
                "budget": budget, "policy": name, "hit_rate": rate,
                "steps": {k: {"hits": h, "misses": [x - y for x, y in
                                                    zip(l, h)]}
                          for k, (h, l) in counts.items()}})
            if args.per_layer:
                for k, (h, l) in counts.items():
                    print(f"  {name} B={budget} {k}: " + " ".join(
                        f"{x / max(1, y):.3f}" for x, y in zip(h, l)))
        label = f"{budget} ({budget / total:.1%})"
        print(f"| {label} | " + " | ".join(f"{r:.3f}" for r in row) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
