#!/usr/bin/env python3
"""Tiered expert weights (issue 16): decode and prefill speed against the
share of the experts that stays resident.

    .venv/bin/python bench/tiers_bench.py --work DIR [--experts 32]
        [--hidden 768 --ffn 768] [--threads N] [--skew 1.0]

Builds (once, into --work; never on the CI path) a loop-form MoE layer of
bench/cpu_models.py (E experts, top-2, f32) whose router columns are scaled by
1 + 3 exp(-skew e / 4), so that routing is skewed towards the low experts as
in trained models; takes its routing profile from `moe-run --stats` of the
all-resident plan on 256 fresh tokens; compiles it all-resident and tiered
with `--device-memory` = resident weights + 100%, 50%, 25% and 12.5% of the
expert weights (`--routing-profile`: the most loaded experts hot); and for
each plan times

  decode    1 token per run, fresh inputs every run (`moe-run --bench
            --fresh-inputs`, so each run routes its own token): tokens/s
  prefill   256 tokens per run, fresh inputs: tokens/s

with the hit rate and MB paged in per run from `--stats`, and the speed
relative to the all-resident plan. Every tiered plan's outputs are compared
byte for byte with the all-resident plan's on the same inputs.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cpu_models  # noqa: E402


def build(work, experts, hidden, ffn, skew):
    cfg = dict(experts=experts, top_k=2, hidden=hidden, ffn=ffn)
    path = os.path.join(work, f"tiers_e{experts}_h{hidden}_f{ffn}_s{skew}.onnx")
    if os.path.exists(path):
        return path
    cpu_models.build("loop", cfg, path)
    # Skew: router column e scaled by 1 + 3 exp(-skew e / 4), in place in
    # the external data, so the low experts win most tokens' top-2 (the
    # router stays a MatMul of the tokens, the form the detector proves).
    model = onnx.load(path, load_external_data=False)
    router = next(t for t in model.graph.initializer if "router" in t.name)
    info = {e.key: e.value for e in router.external_data}
    offset, length = int(info["offset"]), int(info["length"])
    with open(path + ".data", "r+b") as f:
        f.seek(offset)
        w = np.frombuffer(f.read(length), np.float32).reshape(hidden, experts)
        scale = 1 + 3 * np.exp(-skew * np.arange(experts) / 4)
        f.seek(offset)
        f.write((w * scale.astype(np.float32)).astype(np.float32).tobytes())
    return path


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--ffn", type=int, default=768)
    p.add_argument("--skew", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode-runs", type=int, default=60)
    p.add_argument("--prefill-runs", type=int, default=6)
    p.add_argument("--expert-read", default="pread")
    p.add_argument("--fractions", default="1,0.5,0.25,0.125")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    moec = os.path.join(args.build, "bin", "moec")
    moe_run = os.path.join(args.build, "bin", "moe-run")
    model = build(args.work, args.experts, args.hidden, args.ffn, args.skew)
    w = args.work
    base = [moec, "compile", model, "--max-tokens", "256"]
    resident = f"{w}/resident.plan"
    run(base + ["-o", resident])
    run([moe_run, resident, "--tokens", "256", "--threads", str(args.threads),
         "--stats", f"{w}/profile.json", "--output-dir", f"{w}/profile"])
    run(base + ["-o", f"{w}/sizes.plan", "--device-memory", "1T",
                "--report", f"{w}/sizes.json"])
    sizes = json.load(open(f"{w}/sizes.json"))["tiers"][0]
    expert_bytes = sizes["hot_bytes"]

    def bench(plan, tokens, runs, extra=()):
        out = f"{plan}.{tokens}"
        run([moe_run, plan, "--tokens", str(tokens), "--threads",
             str(args.threads), "--bench", str(runs), "--warmup", "2",
             "--fresh-inputs", "--stats", f"{out}.json", "--output-dir", out]
            + list(extra))
        stats = json.load(open(f"{out}.json"))
        hits = misses = paged = 0
        for layer in stats["moe_layers"]:
            ec = layer.get("expert_cache")
            if ec:
                hits += ec["hits"]
                misses += ec["misses"]
                paged += ec["bytes_paged_in"]
        rate = hits / (hits + misses) if hits + misses else None
        # The mean, not the median: with a cache most runs may hit and the
        # median hide the misses.
        mean_ms = sum(s["total_ms"] for s in stats["steps"]) / runs
        return (tokens * 1e3 / mean_ms, rate,
                paged / runs / 1e6, stats["memory"]["peak_rss_bytes"], out)

    rows = []
    ref = {}
    for tokens, runs in ((1, args.decode_runs), (256, args.prefill_runs)):
        ref[tokens] = bench(resident, tokens, runs)
    for f in [float(x) for x in args.fractions.split(",")]:
        budget = sizes["resident_bytes"] + max(int(f * expert_bytes),
                                               sizes["window_bytes"])
        plan = f"{w}/tiered_{f}.plan"
        run(base + ["-o", plan, "--device-memory", str(budget),
                    "--routing-profile", f"{w}/profile.json",
                    "--report", f"{plan}.json"])
        tiers = json.load(open(f"{plan}.json"))["tiers"][0]
        for tokens, runs in ((1, args.decode_runs), (256, args.prefill_runs)):
            tps, rate, mb, rss, out = bench(
                plan, tokens, runs, ["--expert-read", args.expert_read])
            for npy in os.listdir(out):
                if npy.endswith(".npy") and open(f"{out}/{npy}", "rb").read() \
                        != open(f"{ref[tokens][4]}/{npy}", "rb").read():
                    sys.exit(f"{plan}: {npy} differs from the all-resident "
                             "plan's")
            rows.append((f, tiers["hot_experts"], tokens, tps,
                         tps / ref[tokens][0], rate, mb, rss))
    print(f"model: {args.experts} experts top-2, H={args.hidden} "
          f"F={args.ffn}, f32, expert weights {expert_bytes / 1e6:.0f} MB, "
          f"skew {args.skew}, {args.threads} threads, {args.expert_read}")
    print("| resident | hot experts | tokens | tokens/s | vs all-resident "
          "| hit rate | MB paged/run | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for tokens in (1, 256):
        r = ref[tokens]
        print(f"| all (plain plan) | {args.experts} | {tokens} | {r[0]:.1f} "
              f"| 1.00 | - | 0 | {r[3] >> 20} |")
    for f, hot, tokens, tps, rel, rate, mb, rss in rows:
        print(f"| {f * 100:g}% | {hot} | {tokens} | {tps:.1f} | {rel:.2f} | "
              f"{'-' if rate is None else f'{rate:.3f}'} | {mb:.1f} | "
              f"{rss >> 20} |")


if __name__ == "__main__":
    main()
