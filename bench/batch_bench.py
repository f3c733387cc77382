#!/usr/bin/env python3
"""Aggregate tokens/s of continuous batching at 1 to 16 concurrent streams.

  bench/batch_bench.py [--streams 1,2,4,8,16] [--prompt-tokens 16]
      [--new-tokens 64] [--max-seq 256] [--threads 2] [--build build]
      [--expert-ffn F] [--decode D.onnx --prefill P.onnx] [--workdir DIR]

Compiles a generation pair (default: the zoo's Mixtral pair,
examples/zoo/v5: hidden 64, 4 experts of ffn 32, top-2) into one plan;
with --expert-ffn F, a copy of the zoo pair whose experts have ffn F
(seeded random weights in place of the four stacked expert matrices, the
only tensors whose shapes name the ffn size), so that reading the experts'
weights dominates a step as at real layer sizes. Then for each stream count
S starts S
sequences at once on a moert.BatchGenerator with S slots (seeded random
prompts of --prompt-tokens ids, greedy, --new-tokens each) and steps until
all are done. Per S it prints the aggregate new tokens/s (all streams' new
tokens over the wall time, prefill included), the decode-only rate (new
tokens of the steps without prompt rows over their time), the speed-up over
one stream, time to first token (p50/p99 over the streams) and time per
output token (p50/p99 over every gap between a stream's tokens). The same
S sequences through one moert.Generator, one after another, are the
unbatched baseline. A timing, never a test: run it on a quiet machine.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "examples", "zoo", "v5")


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q)) if values else 0.0


def scale_experts(workdir, ffn):
    """Writes the zoo pair with experts of `ffn` columns; their paths."""
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    made, paths = {}, []
    for part in ("prefill", "decode"):
        model = onnx.load(os.path.join(ZOO,
                                       f"mixtral_generation_{part}.onnx"))
        for init in model.graph.initializer:
            if init.name not in ("transpose_5", "transpose_6",
                                 "transpose_12", "transpose_13"):
                continue
            old = numpy_helper.to_array(init)
            # Gate and up [E, H, 2F] (split in halves), down [E, F, H].
            shape = ((old.shape[0], old.shape[1], 2 * ffn)
                     if old.shape[1] == old.shape[2] else
                     (old.shape[0], ffn, old.shape[2]))
            if init.name not in made:
                made[init.name] = (rng.standard_normal(shape) /
                                   np.sqrt(shape[1])).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(made[init.name], init.name))
        path = os.path.join(workdir, f"experts{ffn}_{part}.onnx")
        onnx.save(model, path, save_as_external_data=True,
                  location=os.path.basename(path) + ".data")
        paths.append(path)
    return paths


def run_batched(moert, plan, prompts, new_tokens, threads):
    batch = moert.BatchGenerator(plan, slots=len(prompts), threads=threads)
    start = time.perf_counter()
    added = {}
    for p in prompts:
        added[batch.add(p, max_new_tokens=new_tokens)] = time.perf_counter()
    last, ttft, tpot = {}, [], []
    decode_tokens, decode_seconds, total = 0, 0.0, 0
    while batch.has_work:
        before = batch.stats()
        t0 = time.perf_counter()
        events = batch.step()
        t1 = time.perf_counter()
        after = batch.stats()
        produced = sum(1 for _, token, _ in events if token >= 0)
        total += produced
        if after["prompt_rows"] == before["prompt_rows"]:
            decode_tokens += produced
            decode_seconds += t1 - t0
        for sid, token, _ in events:
            if token < 0:
                continue
            if sid in last:
                tpot.append(t1 - last[sid])
            else:
                ttft.append(t1 - added[sid])
            last[sid] = t1
    wall = time.perf_counter() - start
    return {"tokens": total, "seconds": wall,
            "decode_rate": decode_tokens / decode_seconds
            if decode_seconds else 0.0,
            "ttft": ttft, "tpot": tpot, "blocker": batch.batch_blocker}


def run_serial(moert, plan, prompts, new_tokens, threads):
    gen = moert.Generator(plan, threads=threads)
    start = time.perf_counter()
    total = 0
    for p in prompts:
        total += len(gen.generate(p, max_new_tokens=new_tokens))
    return total / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default="1,2,4,8,16")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-seq", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--decode",
                        default=os.path.join(ZOO,
                                             "mixtral_generation_decode.onnx"))
    parser.add_argument("--prefill",
                        default=os.path.join(ZOO,
                                             "mixtral_generation_prefill.onnx"))
    parser.add_argument("--expert-ffn", type=int, default=0)
    parser.add_argument("--workdir")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import moert

    workdir = args.workdir or tempfile.mkdtemp(prefix="batch_bench.")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "gen.plan")
    if args.expert_ffn:
        args.prefill, args.decode = scale_experts(workdir, args.expert_ffn)
    subprocess.run([os.path.join(args.build, "bin", "moec"), "compile",
                    args.decode, "--prefill", args.prefill, "--max-seq",
                    str(args.max_seq), "-o", path], check=True)
    plan = moert.Plan(path)
    vocab = moert.Generator(plan, threads=1).vocab_size
    rng = np.random.default_rng(0)
    streams = [int(s) for s in args.streams.split(",")]
    prompts = [rng.integers(0, vocab, args.prompt_tokens).tolist()
               for _ in range(max(streams))]
    # Warm-up: the kernels' first calls and the arena's first touch.
    run_batched(moert, plan, prompts[:2], 4, args.threads)
    one = None
    print(f"{os.path.basename(args.decode)}: {args.threads} thread(s), "
          f"prompts of {args.prompt_tokens} ids, {args.new_tokens} new ids "
          f"each, max-seq {args.max_seq}")
    print("| streams | tokens/s | decode tokens/s | vs 1 stream | "
          "unbatched tokens/s | TTFT p50/p99 ms | TPOT p50/p99 ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in streams:
        r = run_batched(moert, plan, prompts[:s], args.new_tokens,
                        args.threads)
        if r["blocker"]:
            print(f"not batched: {r['blocker']}")
        rate = r["tokens"] / r["seconds"]
        one = one or rate
        serial = run_serial(moert, plan, prompts[:s], args.new_tokens,
                            args.threads)
        print(f"| {s} | {rate:.0f} | {r['decode_rate']:.0f} | "
              f"{rate / one:.2f}x | {serial:.0f} | "
              f"{percentile(r['ttft'], 50) * 1e3:.2f} / "
              f"{percentile(r['ttft'], 99) * 1e3:.2f} | "
              f"{percentile(r['tpot'], 50) * 1e3:.2f} / "
              f"{percentile(r['tpot'], 99) * 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
