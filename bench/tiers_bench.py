#!/usr/bin/env python3
"""Tiered expert weights (issue 16): decode and prefill speed against the
share of the experts that stays resident, with and without prefetch.

    .venv/bin/python bench/tiers_bench.py --work DIR [--layers 4]
        [--experts 16] [--hidden 512 --ffn 512] [--threads N] [--skew 1.0]
        [--repeats 3]

Builds (once, into --work; never on the CI path) a stack of loop-form MoE
layers with residuals (test/lib/gen_stacked_moe.py: L layers of E experts,
top-2, f32) whose router columns are scaled by 1 + 3 exp(-skew e / 4), so
that routing is skewed towards the low experts as in trained models; takes
its routing profile from `moe-run --stats` of the all-resident plan on 256
fresh tokens; compiles it all-resident and tiered with `--device-memory` =
resident weights + 100%, 50%, 25% and 12.5% of the expert weights
(`--routing-profile`: the most loaded experts hot); and times each tiered
plan with `--prefetch none` and `--prefetch next-layer`:

  decode    1 token per run, fresh inputs every run (`moe-run --bench
            --fresh-inputs`, so each run routes its own token): tokens/s
  prefill   256 tokens per run, fresh inputs: tokens/s

The configurations alternate, --repeats times (the machine is shared): the
table gives medians of the mean tokens/s, the speed relative to the
all-resident plan's median, the hit rate, the prefetch hit rate (experts
read ahead and then used, over those read ahead), the milliseconds per run
the layers waited for weights, MB paged in per run and the peak RSS. Every
tiered output is compared byte for byte with the all-resident plan's on the
same inputs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
import gen_stacked_moe  # noqa: E402


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--skew", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decode-runs", type=int, default=60)
    p.add_argument("--prefill-runs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--expert-read", default="pread")
    p.add_argument("--fractions", default="1,0.5,0.25,0.125")
    args = p.parse_args()
    w = args.work
    os.makedirs(w, exist_ok=True)
    moec = os.path.join(args.build, "bin", "moec")
    moe_run = os.path.join(args.build, "bin", "moe-run")
    model = os.path.join(w, f"stack_l{args.layers}_e{args.experts}_h"
                         f"{args.hidden}_f{args.ffn}_s{args.skew}.onnx")
    if not os.path.exists(model):
        gen_stacked_moe.build(model, args.layers, args.experts, args.hidden,
                              args.ffn, skew=args.skew)
    base = [moec, "compile", model, "--max-tokens", "256"]
    resident = f"{w}/resident.plan"
    run(base + ["-o", resident])
    run([moe_run, resident, "--tokens", "256", "--threads", str(args.threads),
         "--stats", f"{w}/profile.json", "--output-dir", f"{w}/profile"])
    run(base + ["-o", f"{w}/sizes.plan", "--device-memory", "1T",
                "--report", f"{w}/sizes.json"])
    sizes = json.load(open(f"{w}/sizes.json"))["tiers"][0]
    expert_bytes = sizes["hot_bytes"]

    def bench(name, plan, tokens, runs, extra=()):
        out = f"{w}/{name}.{tokens}"
        run([moe_run, plan, "--tokens", str(tokens), "--threads",
             str(args.threads), "--bench", str(runs), "--warmup", "2",
             "--fresh-inputs", "--stats", f"{out}.json", "--output-dir", out]
            + list(extra))
        stats = json.load(open(f"{out}.json"))
        hits = misses = paged = issued = used = 0
        wait = 0.0
        for layer in stats["moe_layers"]:
            ec = layer.get("expert_cache")
            if ec:
                hits += ec["hits"]
                misses += ec["misses"]
                paged += ec["bytes_paged_in"]
                wait += ec["wait_ms"]
                issued += ec["prefetch"]["issued"]
                used += ec["prefetch"]["used"]
        # The mean, not the median: with a cache most runs may hit and the
        # median hide the misses.
        mean_ms = sum(s["total_ms"] for s in stats["steps"]) / runs
        return dict(tps=tokens * 1e3 / mean_ms,
                    rate=hits / (hits + misses) if hits + misses else None,
                    ahead=used / issued if issued else None, wait=wait,
                    mb=paged / runs / 1e6,
                    rss=stats["memory"]["peak_rss_bytes"], out=out)

    configs = [("all", resident, "-", [])]
    for f in [float(x) for x in args.fractions.split(",")]:
        budget = sizes["resident_bytes"] + max(int(f * expert_bytes),
                                               sizes["window_bytes"])
        plan = f"{w}/tiered_{f}.plan"
        run(base + ["-o", plan, "--device-memory", str(budget),
                    "--routing-profile", f"{w}/profile.json",
                    "--report", f"{plan}.json"])
        for ahead in ("none", "next-layer"):
            configs.append((f"{f * 100:g}%", plan, ahead,
                            ["--expert-read", args.expert_read,
                             "--prefetch", ahead]))
    results = {}
    for repeat in range(args.repeats):
        for label, plan, ahead, extra in configs:
            for tokens, runs in ((1, args.decode_runs),
                                 (256, args.prefill_runs)):
                r = bench(f"{label}_{ahead}", plan, tokens, runs, extra)
                results.setdefault((label, ahead, tokens), []).append(r)
                ref = results[("all", "-", tokens)][0]["out"]
                for npy in os.listdir(r["out"]):
                    if npy.endswith(".npy") and \
                            open(f"{r['out']}/{npy}", "rb").read() != \
                            open(f"{ref}/{npy}", "rb").read():
                        sys.exit(f"{plan} --prefetch {ahead}: {npy} differs "
                                 "from the all-resident plan's")

    def median(rs, key):
        values = [r[key] for r in rs if r[key] is not None]
        return statistics.median(values) if values else None

    print(f"model: {args.layers} layers of {args.experts} experts top-2, "
          f"H={args.hidden} F={args.ffn}, f32, expert weights "
          f"{expert_bytes / 1e6:.0f} MB, skew {args.skew}, {args.threads} "
          f"threads, {args.expert_read}; medians of {args.repeats} "
          "alternated repeats")
    print("| resident | prefetch | tokens | tokens/s | vs all-resident "
          "| hit rate | prefetch hit rate | wait ms/run | MB paged/run "
          "| peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fmt = (lambda v, spec: "-" if v is None else format(v, spec))
    for tokens in (1, 256):
        base_tps = median(results[("all", "-", tokens)], "tps")
        for label, _, ahead, _ in configs:
            rs = results[(label, ahead, tokens)]
            tps = median(rs, "tps")
            print(f"| {label} | {ahead} | {tokens} | {tps:.1f} | "
                  f"{tps / base_tps:.2f} | {fmt(median(rs, 'rate'), '.3f')} | "
                  f"{fmt(median(rs, 'ahead'), '.3f')} | "
                  f"{median(rs, 'wait'):.3f} | {median(rs, 'mb'):.1f} | "
                  f"{int(median(rs, 'rss')) >> 20} |")


if __name__ == "__main__":
    main()
