#!/usr/bin/env python3
"""Decode tokens/s of moe-run against an onnxruntime loop over the same pair.

  bench/generate_bench.py [--prefix 1,128,512,960] [--new-tokens 33]
      [--max-seq 1024] [--threads 1] [--build build] [--workdir DIR]

Compiles the zoo's Mixtral generation pair (examples/zoo/v5) into one
generation plan, then for each prompt length prints one line per cache mode
of moe-run (--kv-cache in-place, the default, and copy): decode tokens/s and
time per token (from its --stats), the parts of that spent in the caches'
Concat steps and in attention, the rest (what a step costs besides
attention's read of the prefix, which should not grow with it), and the
decode tokens/s of the reference loop of test/lib/generate_ref.py
(onnxruntime, one thread, greedy) after the same prompt.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
import generate_ref  # noqa: E402

ZOO = os.path.join(ROOT, "examples", "zoo", "v5")
DECODE = os.path.join(ZOO, "mixtral_generation_decode.onnx")
PREFILL = os.path.join(ZOO, "mixtral_generation_prefill.onnx")


def ort_decode_rate(prompt, steps):
    """Greedy decode steps per second of onnxruntime after `prompt`."""
    pairs = generate_ref.find_pairs(onnx.load(DECODE, load_external_data=False))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    providers = ["CPUExecutionProvider"]
    prefill = ort.InferenceSession(PREFILL, options, providers=providers)
    decode = ort.InferenceSession(DECODE, options, providers=providers)
    prefill_names = [o.name for o in prefill.get_outputs()]
    decode_names = [o.name for o in decode.get_outputs()]
    n = len(prompt)
    values = dict(zip(prefill_names, prefill.run(None, {
        "input_ids": np.array([prompt], dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None]})))
    caches = {past: values[next(o for o in prefill_names
                                if generate_ref.stem(o) ==
                                generate_ref.stem(present))]
              for past, present in pairs}
    token = int(np.argmax(values["logits"][0, -1]))
    start = time.perf_counter()
    for _ in range(steps):
        feeds = {"input_ids": np.array([[token]], dtype=np.int64),
                 "position_ids": np.array([[n]], dtype=np.int64), **caches}
        values = dict(zip(decode_names, decode.run(None, feeds)))
        caches = {past: values[present] for past, present in pairs}
        token = int(np.argmax(values["logits"][0, -1]))
        n += 1
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefix", default="1,128,512,960")
    parser.add_argument("--new-tokens", type=int, default=33)
    parser.add_argument("--max-seq", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--workdir")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="generate_bench.")
    os.makedirs(workdir, exist_ok=True)
    plan = os.path.join(workdir, "gen.plan")
    bin_dir = os.path.join(args.build, "bin")
    subprocess.run([os.path.join(bin_dir, "moec"), "compile", DECODE,
                    "--prefill", PREFILL, "--max-seq", str(args.max_seq),
                    "-o", plan], check=True, stderr=subprocess.DEVNULL)
    pairs = generate_ref.find_pairs(onnx.load(DECODE, load_external_data=False))
    presents = {present for _, present in pairs}
    # The cache Concats are the steps producing the presents; the plan names
    # steps after the source nodes, so find them by output name.
    inspect = json.loads(subprocess.run(
        [os.path.join(bin_dir, "moec"), "inspect", plan, "--json"],
        check=True, capture_output=True, text=True).stdout)
    schedule = inspect["schedules"][0]
    tensors = schedule["tensors"]
    concat = {i for i, step in enumerate(schedule["steps"])
              if step["op"] == "Concat" and any(
                  tensors[o]["name"] in presents for o in step["outputs"])}
    attention = {i for i, step in enumerate(schedule["steps"])
                 if step["op"] == "Attention"}
    for length in [int(x) for x in args.prefix.split(",")]:
        prompt = [i % 128 for i in range(length)]
        for mode in ("in-place", "copy"):
            stats = os.path.join(workdir, f"stats{length}-{mode}.json")
            subprocess.run([os.path.join(bin_dir, "moe-run"), plan,
                            "--prompt-ids", ",".join(map(str, prompt)),
                            "--max-new-tokens", str(args.new_tokens),
                            "--threads", str(args.threads),
                            "--kv-cache", mode, "--stats", stats],
                           check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            s = json.load(open(stats))
            steps = max(s["decode_steps"], 1)

            def ms(indices):
                return sum(x["total_ms"] for x in s["decode_steps_stats"]
                           if x["index"] in indices) / steps

            per_token = s["decode_ms"] / steps
            print(f"prefix {length}, --kv-cache {mode} "
                  f"({s['kv_caches_in_place']} of {s['kv_caches']} in place): "
                  f"moe-run decode {s['decode_tokens_per_s']:.0f} tokens/s "
                  f"({per_token:.4f} ms/token: cache Concats "
                  f"{ms(concat):.4f} ms, attention {ms(attention):.4f} ms, "
                  f"the rest {per_token - ms(attention):.4f} ms)", flush=True)
        ort_rate = ort_decode_rate(prompt, steps)
        print(f"prefix {length}: onnxruntime loop {ort_rate:.0f} tokens/s",
              flush=True)

if __name__ == "__main__":
    main()
