#!/usr/bin/env python3
"""Aggregate tokens/s of continuous batching at 1 to 16 concurrent streams.

  bench/batch_bench.py [--streams 1,2,4,8,16] [--prompt-tokens 16]
      [--new-tokens 64] [--max-seq 256] [--threads 2] [--build build]
      [--expert-ffn F] [--decode D.onnx --prefill P.onnx] [--workdir DIR]
      [--weight-dtype f32|bf16|int8] [--llama-server BIN --gguf MODEL.gguf]
      [--model BUILDER_DIR]

Compiles a generation pair (default: the zoo's Mixtral pair,
examples/zoo/v5: hidden 64, 4 experts of ffn 32, top-2) into one plan;
with --expert-ffn F, a copy of the zoo pair whose experts have ffn F
(seeded random weights in place of the four stacked expert matrices, the
only tensors whose shapes name the ffn size), so that reading the experts'
weights dominates a step as at real layer sizes; with --model, an
onnxruntime-genai builder folder (`moec compile DIR`, one graph, the
prefill schedule its first prompt: e.g. examples/zoo/genai/lfm2_moe_fp32,
whose convolution states the batched step keeps per sequence). Then for
each stream count
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

The roofline columns say how far batching can go on this machine. A decode
step reads every dense matrix once and, per MoE layer, each expert that at
least one of its rows selected (counted from the generator's expert
selections before and after the step); the plan's tensor sizes (`moec
inspect --json`) give the bytes. That over the read bandwidth measured in the
same run (bench/compare_ort.py's) is the step's shortest possible time: the
roofline decode tokens/s, the share of it reached, and the roofline's own gain
over one stream, the most any kernel could give at that stream count
(KV-cache reads, under 1% of a step's bytes at these lengths, are left out).

"Decode tokens per CPU s" divides the decode steps' new tokens by the
process's CPU seconds in them, times --threads: the decode rate the threads
reach while they run, which other processes' load does not dilute as it
does wall time (memory contention still counts; at 1 thread it is exact,
at more the pool's idle waits, which use no CPU, make it an upper bound).

With --llama-server, the same prompts (as token ids) go to llama.cpp's
server on --gguf at S concurrent clients (`-np S`, `--cont-batching`,
greedy, `n_predict` new ids, `ignore_eos`), and its aggregate tokens/s is
printed beside moe-run's.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "examples", "zoo", "v5")
sys.path.insert(0, os.path.join(ROOT, "bench"))
from compare_ort import measure_bandwidth  # noqa: E402


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


def plan_bytes(build, plan):
    """Weight bytes of the plan's decode schedule: every MatMul, Gemm and
    Linear weight (read once per step whatever its rows), and per Experts
    step, in order, the bytes of one expert (its weights over the expert
    count)."""
    info = json.loads(subprocess.run(
        [os.path.join(build, "bin", "moec"), "inspect", plan, "--json"],
        check=True, capture_output=True, text=True).stdout)
    schedule = info["schedules"][0]
    tensors = schedule["tensors"]
    dense, experts = 0, []
    for step in schedule["steps"]:
        weights = [tensors[i] for i in step["inputs"]
                   if tensors[i]["storage"] == "weight"]
        if step["op"] in ("MatMul", "Gemm", "MatMulNBits", "Linear"):
            dense += sum(t["bytes"] for t in weights)
        elif step["op"] == "Experts":
            # The stacked expert weights lead with the expert count.
            count = max(t["dims"][0]["bound"] for t in weights if t["dims"])
            experts.append(sum(t["bytes"] for t in weights) / count)
    return dense, experts


def step_read(dense, expert_bytes, before, after):
    """Bytes a decode step reads: the dense weights, and each expert some row
    of the step selected (selection counts before and after it)."""
    total = dense
    for layer, (b, a) in enumerate(zip(before, after)):
        total += expert_bytes[layer] * sum(1 for x, y in zip(b, a) if y > x)
    return total


def run_batched(moert, plan, prompts, new_tokens, threads, weights=None):
    batch = moert.BatchGenerator(plan, slots=len(prompts), threads=threads)
    decode_bytes = 0.0
    start = time.perf_counter()
    added = {}
    for p in prompts:
        added[batch.add(p, max_new_tokens=new_tokens)] = time.perf_counter()
    last, ttft, tpot = {}, [], []
    decode_tokens, decode_seconds, decode_cpu, total = 0, 0.0, 0.0, 0
    while batch.has_work:
        before = batch.stats()
        chosen = batch.expert_selections() if weights else None
        c0, t0 = time.process_time(), time.perf_counter()
        events = batch.step()
        t1, c1 = time.perf_counter(), time.process_time()
        after = batch.stats()
        produced = sum(1 for _, token, _ in events if token >= 0)
        total += produced
        if after["prompt_rows"] == before["prompt_rows"]:
            decode_tokens += produced
            decode_seconds += t1 - t0
            decode_cpu += c1 - c0
            if weights:
                decode_bytes += step_read(*weights, chosen,
                                          batch.expert_selections())
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
            "decode_cpu_rate": decode_tokens * threads / decode_cpu
            if decode_cpu else 0.0,
            "bytes_per_token": decode_bytes / decode_tokens
            if decode_tokens else 0.0,
            "ttft": ttft, "tpot": tpot, "blocker": batch.batch_blocker}


def run_serial(moert, plan, prompts, new_tokens, threads):
    gen = moert.Generator(plan, threads=threads)
    start = time.perf_counter()
    total = 0
    for p in prompts:
        total += len(gen.generate(p, max_new_tokens=new_tokens))
    return total / (time.perf_counter() - start)


def llama_server_rate(args, prompts):
    """Aggregate new tokens/s of llama.cpp's server at len(prompts) concurrent
    greedy clients, prefill included, like run_batched's."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    port = 18080 + len(prompts)
    server = subprocess.Popen(
        [args.llama_server, "-m", args.gguf, "--port", str(port),
         "-np", str(len(prompts)), "-c", str(len(prompts) * args.max_seq),
         "-t", str(args.threads), "-tb", str(args.threads), "--cont-batching",
         "--no-webui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health") as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None:
                sys.exit(f"llama-server exited with {server.returncode}")
            time.sleep(0.1)

        def complete(prompt, n=args.new_tokens):
            body = json.dumps({"prompt": prompt, "n_predict": n,
                               "temperature": 0, "top_k": 1,
                               "ignore_eos": True, "cache_prompt": False})
            req = urllib.request.Request(url + "/completion", body.encode(),
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req) as r:
                return json.load(r)["tokens_predicted"]

        complete(prompts[0], 4)  # warm-up
        with ThreadPoolExecutor(len(prompts)) as pool:
            start = time.perf_counter()
            total = sum(pool.map(complete, prompts))
            return total / (time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait()


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
    parser.add_argument("--weight-dtype", default="f32")
    parser.add_argument("--llama-server")
    parser.add_argument("--gguf")
    parser.add_argument("--workdir")
    parser.add_argument("--model")
    args = parser.parse_args()
    if bool(args.llama_server) != bool(args.gguf):
        parser.error("--llama-server and --gguf go together")
    sys.path.insert(0, os.path.join(args.build, "python"))
    import moert

    workdir = args.workdir or tempfile.mkdtemp(prefix="batch_bench.")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "gen.plan")
    if args.expert_ffn:
        args.prefill, args.decode = scale_experts(workdir, args.expert_ffn)
    source = ([args.model] if args.model else
              [args.decode, "--prefill", args.prefill])
    if args.model:
        args.decode = args.model.rstrip("/")
    subprocess.run([os.path.join(args.build, "bin", "moec"), "compile"] +
                   source + ["--max-seq", str(args.max_seq),
                             "--weight-dtype", args.weight_dtype,
                             "-o", path], check=True)
    weights = plan_bytes(args.build, path)
    plan = moert.Plan(path)
    vocab = moert.Generator(plan, threads=1).vocab_size
    rng = np.random.default_rng(0)
    streams = [int(s) for s in args.streams.split(",")]
    prompts = [rng.integers(0, vocab, args.prompt_tokens).tolist()
               for _ in range(max(streams))]
    # Warm-up: the kernels' first calls and the arena's first touch.
    run_batched(moert, plan, prompts[:2], 4, args.threads)
    bandwidth = measure_bandwidth(args.threads)
    one = roof_one = None
    print(f"{os.path.basename(args.decode)} ({args.weight_dtype}): "
          f"{args.threads} thread(s), prompts of {args.prompt_tokens} ids, "
          f"{args.new_tokens} new ids each, max-seq {args.max_seq}; dense "
          f"weights {weights[0] / 1e6:.1f} MB, one expert "
          f"{weights[1][0] / 1e6 if weights[1] else 0:.2f} MB x "
          f"{len(weights[1])} layers; read bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s; load average {os.getloadavg()}")
    llama = " llama-server tokens/s | moe-run / llama |" if args.gguf else ""
    print("| streams | tokens/s | decode tokens/s | vs 1 stream | "
          "unbatched tokens/s | TTFT p50/p99 ms | TPOT p50/p99 ms | "
          "MB/token | roofline decode tokens/s | % of roofline | "
          "roofline vs 1 stream | decode tokens per CPU s |" + llama)
    print("|---:" * (12 + (2 if args.gguf else 0)) + "|")
    for s in streams:
        r = run_batched(moert, plan, prompts[:s], args.new_tokens,
                        args.threads, weights)
        if r["blocker"]:
            print(f"not batched: {r['blocker']}")
        rate = r["tokens"] / r["seconds"]
        one = one or rate
        roof = bandwidth / r["bytes_per_token"]
        roof_one = roof_one or roof
        serial = run_serial(moert, plan, prompts[:s], args.new_tokens,
                            args.threads)
        row = (f"| {s} | {rate:.0f} | {r['decode_rate']:.0f} | "
               f"{rate / one:.2f}x | {serial:.0f} | "
               f"{percentile(r['ttft'], 50) * 1e3:.2f} / "
               f"{percentile(r['ttft'], 99) * 1e3:.2f} | "
               f"{percentile(r['tpot'], 50) * 1e3:.2f} / "
               f"{percentile(r['tpot'], 99) * 1e3:.2f} | "
               f"{r['bytes_per_token'] / 1e6:.1f} | {roof:.0f} | "
               f"{100 * r['decode_rate'] / roof:.0f}% | "
               f"{roof / roof_one:.2f}x | {r['decode_cpu_rate']:.0f} |")
        if args.gguf:
            other = llama_server_rate(args, prompts[:s])
            row += f" {other:.1f} | {rate / other:.2f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
