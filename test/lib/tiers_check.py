#!/usr/bin/env python3
"""Tiered expert weights end to end: a plan whose experts are paged runs
within its budget and gives the all-resident plan's outputs bit for bit.

    tiers_check.py MODEL.onnx --workdir DIR --fraction F [--dim NAME=N ...]
                   [--expert-read pread|direct|mmap] [--check-memory]
                   [--address-limit] [--compile-arg ARG ...]
                   [--prefetch none|next-layer]

Compiles MODEL twice, all-resident and with `moec compile --device-memory`
set to the resident weights plus F of the expert weights, or the cold
experts' least cache (one token's experts of a layer) when that is more; runs both with
`moe-run --stats` on the same seeded inputs and checks:

* every output of the tiered plan equals the all-resident plan's byte for
  byte (.npy files), and matches onnxruntime (max|d| <= 1e-5 * max(1, |ort|));
* the stats show the cache at work: per layer, hits + misses = the experts
  the routing selected, bytes paged in = misses * expert bytes, and a
  measured read bandwidth;
* with --prefetch next-layer (the tiered runs read experts ahead), the
  outputs are the same, and the stats count reads ahead: some were issued,
  no more were used than issued, and their bytes are whole experts;
* with --check-memory (a model large enough that the difference is well
  above the noise), the tiered run's peak resident set (VmHWM) stays below the baseline (the
  all-resident run's peak less its weights, which it touched) plus the
  budget plus a margin for the page-rounded cache buffers and the tiered
  path's own allocations, and far below the all-resident run's;
* with --address-limit, both plans run again under one address-space limit
  (RLIMIT_AS, as `ulimit -v`) halfway between their peak virtual sizes: the
  all-resident plan must fail (the limit binds) and the tiered one succeed
  with the same outputs.
"""

import argparse
import json
import os
import resource
import subprocess
import sys

import numpy as np
import onnxruntime as ort

MARGIN = 8 << 20


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def check(cmd):
    r = run(cmd)
    if r.returncode:
        sys.exit(f"tiers: {' '.join(cmd)} failed ({r.returncode}):\n"
                 f"{r.stdout}{r.stderr}")
    return r


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--workdir", required=True)
    p.add_argument("--fraction", type=float, required=True)
    p.add_argument("--dim", action="append", default=[])
    p.add_argument("--max-tokens", default="64")
    p.add_argument("--expert-read", default="pread")
    p.add_argument("--check-memory", action="store_true")
    p.add_argument("--address-limit", action="store_true")
    p.add_argument("--compile-arg", action="append", default=[])
    p.add_argument("--prefetch", default="none")
    args = p.parse_args()
    w = args.workdir
    os.makedirs(w, exist_ok=True)
    env = dict(os.environ, MALLOC_ARENA_MAX="1")

    base = ["moec", "compile", args.model, "--max-tokens", args.max_tokens]
    check(base + ["-o", f"{w}/resident.plan"])
    # The sizes, from a tiered compile with room for every expert.
    check(base + ["-o", f"{w}/sizes.plan", "--device-memory", "1T",
                  "--report", f"{w}/sizes.json"])
    sizes = json.load(open(f"{w}/sizes.json"))["tiers"][0]
    expert_bytes = sizes["hot_bytes"]
    # At least the cold experts' least cache (F = 0: just that).
    budget = sizes["resident_bytes"] + max(int(args.fraction * expert_bytes),
                                           sizes["window_bytes"])
    check(base + ["-o", f"{w}/tiered.plan", "--device-memory", str(budget),
                  "--report", f"{w}/tiered.json"] + args.compile_arg)
    tiers = json.load(open(f"{w}/tiered.json"))["tiers"][0]
    print(f"tiers: experts {expert_bytes} bytes, budget {budget} bytes "
          f"({expert_bytes / max(1, budget):.1f}x smaller), "
          f"{tiers['hot_experts']} hot, {tiers['cold_experts']} cold")

    dims = sum((["--dim", d] for d in args.dim), [])

    def moe_run(plan, out, extra=(), limit=None):
        def pre():
            if limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        cmd = ["moe-run", plan, "--threads", "2", "--seed", "5",
               "--output-dir", out, "--stats", f"{out}.json"] + dims + list(extra)
        return run(cmd, env=env, preexec_fn=pre)

    a = moe_run(f"{w}/resident.plan", f"{w}/a")
    b = moe_run(f"{w}/tiered.plan", f"{w}/b", ["--expert-read", args.expert_read, "--prefetch", args.prefetch])
    for name, r in (("resident", a), ("tiered", b)):
        if r.returncode:
            sys.exit(f"tiers: the {name} run failed:\n{r.stdout}{r.stderr}")
    outputs = sorted(f for f in os.listdir(f"{w}/a") if f.endswith(".npy"))
    for f in outputs:
        if open(f"{w}/a/{f}", "rb").read() != open(f"{w}/b/{f}", "rb").read():
            sys.exit(f"tiers: output {f} of the tiered plan differs from the "
                     "all-resident plan's")

    # The same inputs through onnxruntime: moe-run writes what it generated
    # only as outputs, so regenerate them by running with explicit inputs.
    sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    shape = {}
    for d in args.dim:
        k, v = d.split("=")
        shape[k] = int(v)
    rng = np.random.default_rng(5)
    feeds = {}
    for i in sess.get_inputs():
        s = [shape.get(x, x) if isinstance(x, str) else x for x in i.shape]
        feeds[i.name] = rng.uniform(-1, 1, s).astype(np.float32)
        np.save(f"{w}/in_{i.name}.npy", feeds[i.name])
    inputs = sum((["--input", f"{k}={w}/in_{k}.npy"] for k in feeds), [])
    c = moe_run(f"{w}/tiered.plan", f"{w}/c",
                ["--expert-read", args.expert_read, "--prefetch", args.prefetch] + inputs)
    if c.returncode:
        sys.exit(f"tiers: the tiered run on saved inputs failed:\n{c.stderr}")
    for o, want in zip(sess.get_outputs(), sess.run(None, feeds)):
        name = o.name
        got = np.load(f"{w}/c/{name}.npy")
        err = float(np.max(np.abs(got - want))) if want.size else 0.0
        scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        if err > 1e-5 * scale:
            sys.exit(f"tiers: output {name}: max error {err} against "
                     "onnxruntime")

    sa, sb = json.load(open(f"{w}/a.json")), json.load(open(f"{w}/b.json"))
    cache = sb["expert_cache"]
    assert cache["budget"] == budget, cache
    assert cache["used_bytes"] <= cache["capacity_bytes"], cache
    assert cache["measured_read_bandwidth_bytes_per_s"] > 0, cache
    issued = used = 0
    for layer in sb["moe_layers"]:
        ec = layer["expert_cache"]
        selected = sum(1 for n in layer["tokens_per_expert"] if n)
        layer_tiers = [t for t in tiers["layers"]
                       if t["step"] == layer["experts_step"]][0]
        assert ec["hits"] + ec["misses"] >= selected * layer["runs"], ec
        assert ec["bytes_paged_in"] == ec["misses"] * layer_tiers["expert_bytes"], ec
        ahead = ec["prefetch"]
        assert ahead["used"] <= ahead["issued"], ec
        assert ahead["bytes"] % layer_tiers["expert_bytes"] == 0, ec
        assert ahead["bytes"] <= ahead["issued"] * layer_tiers["expert_bytes"], ec
        issued += ahead["issued"]
        used += ahead["used"]
    assert cache["prefetch"] == args.prefetch, cache
    if args.prefetch != "none":
        if not issued:
            sys.exit("tiers: no expert was read ahead")
        print(f"tiers: prefetch read {issued} experts ahead, {used} used")
    weights = sizes["resident_bytes"] + expert_bytes
    rss_a = sa["memory"]["peak_rss_bytes"]
    rss_b = sb["memory"]["peak_rss_bytes"]
    baseline = rss_a - weights
    print(f"tiers: peak RSS {rss_a >> 20} MiB all-resident, {rss_b >> 20} MiB "
          f"tiered; baseline {baseline >> 20} MiB + budget {budget >> 20} MiB")
    if args.check_memory and rss_b > baseline + budget + MARGIN:
        sys.exit(f"tiers: the tiered run's peak RSS {rss_b} exceeds the "
                 f"baseline {baseline} + budget {budget} + {MARGIN}")
    if args.check_memory and rss_b > rss_a - (expert_bytes - budget) // 2:
        sys.exit(f"tiers: the tiered run's peak RSS {rss_b} is not well below "
                 f"the all-resident run's {rss_a}")

    if args.address_limit:
        va = sa["memory"]["peak_virtual_bytes"]
        vb = sb["memory"]["peak_virtual_bytes"]
        limit = (va + vb) // 2
        if not vb < limit < va:
            sys.exit(f"tiers: no address limit separates the runs ({va}, {vb})")
        a2 = moe_run(f"{w}/resident.plan", f"{w}/a2", limit=limit)
        b2 = moe_run(f"{w}/tiered.plan", f"{w}/b2",
                     ["--expert-read", args.expert_read, "--prefetch", args.prefetch], limit=limit)
        if a2.returncode == 0:
            sys.exit(f"tiers: the all-resident plan ran under {limit} bytes of "
                     "address space; the limit does not bind")
        if b2.returncode:
            sys.exit(f"tiers: the tiered plan failed under {limit} bytes of "
                     f"address space:\n{b2.stderr}")
        for f in outputs:
            if open(f"{w}/a/{f}", "rb").read() != open(f"{w}/b2/{f}", "rb").read():
                sys.exit(f"tiers: output {f} differs under the address limit")
        print(f"tiers: under an address-space limit of {limit >> 20} MiB the "
              "all-resident plan fails and the tiered plan runs")
    print("tiers: ok, tiered outputs equal the all-resident plan's")


if __name__ == "__main__":
    main()
