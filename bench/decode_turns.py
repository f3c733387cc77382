#!/usr/bin/env python3
"""Whole-model decode of generation plans by two moe-run builds, in turns.

    bench/decode_turns.py --before OLD/bin/moe-run --after NEW/bin/moe-run \\
        --stream-bench NEW/bin/moe-stream-bench --rounds 3 --threads 1,2 \\
        PLAN[=MB_PER_TOKEN] ...

Each round measures the read bandwidth on each thread count (moe-stream-
bench's max-reduce over 512 MiB), then runs every plan with `moe-run PLAN
--bench 2 --prompt-tokens 64 --max-new-tokens 32 --threads T --stats` under
both builds, one after the other (a plan the `before` build cannot load is
skipped there), and keeps each pair's best decode rate. Prints a Markdown
table: tokens/s, the decode step's time in dense (MatMul, Gemm, Linear)
steps, Experts steps and the rest (--stats), and, given the bytes a decode
step reads (MB_PER_TOKEN; bench/llama_bench.py's step_bytes counts them),
the rate that reads them as a share of the bandwidth.
"""

import argparse
import json
import os
import re
import subprocess

DENSE_OPS = ("MatMul", "Gemm", "Linear")


def bandwidth(stream_bench, threads):
    out = subprocess.run([stream_bench, "64", "64", str(threads), "f32", "1",
                          "auto", "1"], capture_output=True, text=True,
                         check=True).stdout
    return float(re.search(r"read bandwidth ([0-9.]+)", out).group(1))


def bench(binary, plan, threads, stats):
    out = subprocess.run([binary, plan, "--bench", "2", "--prompt-tokens",
                          "64", "--max-new-tokens", "32", "--threads",
                          str(threads), "--stats", stats],
                         capture_output=True, text=True)
    if out.returncode:
        return None
    rates = dict(re.findall(r"\|\s*(pp|tg) \d+\s*\|\s*([0-9.]+)", out.stdout))
    parts = {"dense": 0.0, "experts": 0.0, "rest": 0.0}
    for x in json.load(open(stats))["decode_steps_stats"]:
        key = ("dense" if x["op"] in DENSE_OPS else
               "experts" if x["op"] == "Experts" else "rest")
        parts[key] += x["mean_ms"]
    return float(rates["tg"]), float(rates["pp"]), parts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--stream-bench", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--workdir", default="/tmp/decode_turns")
    parser.add_argument("plans", nargs="+")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",")]
    plans = [(p.split("=")[0], float(p.split("=")[1]) if "=" in p else None)
             for p in args.plans]
    best, bws = {}, {}
    for _ in range(args.rounds):
        for t in threads:
            bws[t] = max(bws.get(t, 0.0), bandwidth(args.stream_bench, t))
            for plan, _ in plans:
                for name, binary in (("before", args.before),
                                     ("after", args.after)):
                    stats = os.path.join(args.workdir, f"{name}-{t}.json")
                    result = bench(binary, plan, t, stats)
                    key = (os.path.basename(plan), t, name)
                    if result and (key not in best or
                                   result[0] > best[key][0]):
                        best[key] = result
    print("read bandwidth (best of the run): " +
          ", ".join(f"{t} thread(s) {bws[t]:.1f} GB/s" for t in threads))
    print("| plan | threads | moe-run | tg t/s | pp t/s | ms/token | dense ms "
          "| experts ms | rest ms | MB/token | GB/s | % of bw |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    mb = {os.path.basename(p): m for p, m in plans}
    for (plan, t, name), (tg, pp, parts) in sorted(best.items()):
        rate = f"{mb[plan] * tg / 1e3:.1f}" if mb[plan] else "-"
        share = (f"{100 * mb[plan] * tg / 1e3 / bws[t]:.0f}" if mb[plan]
                 else "-")
        print(f"| {plan} | {t} | {name} | {tg:.1f} | {pp:.1f} | "
              f"{1000 / tg:.2f} | {parts['dense']:.2f} | "
              f"{parts['experts']:.2f} | {parts['rest']:.2f} | "
              f"{mb[plan] or '-'} | {rate} | {share} |")


if __name__ == "__main__":
    main()
