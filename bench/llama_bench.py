#!/usr/bin/env python3
"""Generation speed of moe-run against llama.cpp on the same checkpoint.

  .venv-export-v5/bin/python bench/llama_bench.py [--threads 1,2]
      [--prompt 64] [--gen 32] [--reps 3] [--rounds 3]
      [--dtypes f32,bf16,int8,int4,int4a8] [--build build] [--models bench/models/llama]
      [--llama-dir bench/models/llamacpp]
      [--decode-only [--moe-run NAME=PATH ...]]

Never run in CI (it downloads and builds llama.cpp, and its timings on a
shared machine are noise). It does, once, into --models (git-ignored):

1. A random-weight Mixtral checkpoint (transformers' MixtralForCausalLM,
   hidden 1024, expert FFN 2816, 8 experts top-2, 4 layers, 16 query and 4
   KV heads, vocabulary 4096, seed 0, weights N(0, 0.02)) saved with
   save_pretrained, and a small SentencePiece tokenizer (llama.cpp's
   converter needs one; it pads the vocabulary to 4096).
2. transformers 5.x's generation pair of it (OnnxExporter
   .export_for_generation) and moec's generation plans: f32, and
   `--weight-dtype bf16` and `int8`.
3. llama.cpp, from the llama-cpp-python sdist's vendored sources (`pip
   download --no-binary :all: --no-deps llama-cpp-python`; the wheel has no
   llama-bench), built with CMake, -DGGML_NATIVE=ON (the script adds
   -mno-amx-* where the CPU has AMX, whose tiles fault in this build on some
   machines), targets llama-bench, llama-server (bench/batch_bench.py's
   peer) and this script's greedy tool
   (llama_greedy.c, a few calls of llama.h), and the GGUFs of llama.cpp's own
   convert_hf_to_gguf.py (its gguf-py from the same sdist) at f32, f16,
   bf16 and q8_0, and q4_0 by its llama-quantize from the f32 one.

Then, in one run: checks that both engines generate the same greedy ids at
f32 (fails loudly if not), and --rounds times, the engines taking turns,
for each thread count measures the machine's read bandwidth (the best of
numpy's maximum and matrix-vector products and moe-stream-bench's
max-reduce on moe-run's pool) and the GEMM peaks, and runs `llama-bench -p
P -n G -t T -r R` on every GGUF and `moe-run PLAN --bench R --prompt-tokens
P --max-new-tokens G --threads T` on every plan, keeping each one's best,
and prints pp (prompt tokens/s) and tg (generated tokens/s) of both and
their ratios (moe-run over llama.cpp: above 1, moe-run is faster) for the
pairs f32/f32,
bf16/f16, bf16/bf16, int8/q8_0 and int4/q4_0 (moe-run's int4 with f32
and with int8 activations, `int4a8`), the bytes one decode step reads (the
model's weights that a token touches: every dense matrix and the top-k
experts of each layer, at each side's stored size) over the tg time as a
share of the measured bandwidth, moe-run's prompt roofline (the larger of
its multiply-adds at the GEMM peaks of moe-run's kernels, f32 sgemm and
for bf16 and int8 experts the bf16 matmul, and of the weights it reads
over the bandwidth; none for int4a8, whose prompts multiply int8) with
twice llama.cpp's pp as a share of it, and the ISA each side used (llama.cpp's
system_info line; moe-run's kernels and the CPU's flags).

--decode-only skips llama.cpp and times moe-run binaries side by side
(--build's and each --moe-run, in turns): decode tokens/s, the ms per step
in dense MatMul/Gemm steps, in Experts and in the rest (--stats), and the
bytes per step over the step's time against the read bandwidth.
"""

import argparse
import glob
import importlib
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from compare_ort import measure_bandwidth  # noqa: E402

CONFIG = dict(vocab_size=4096, hidden_size=1024, intermediate_size=2816,
              num_hidden_layers=4, num_attention_heads=16,
              num_key_value_heads=4, num_local_experts=8,
              num_experts_per_tok=2, max_position_embeddings=2048,
              bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
LLAMA_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")
# llama.cpp's converter writes no q4_0: llama-quantize makes it from f32.
QUANTIZED_TYPES = ("q4_0",)
# Pairs compared: moe-run dtype, llama.cpp type. int4a8 is --weight-dtype
# int4 --int8-activations, the arithmetic of q4_0 x q8_0.
PAIRS = (("f32", "f32"), ("bf16", "f16"), ("bf16", "bf16"), ("int8", "q8_0"),
         ("int4", "q4_0"), ("int4a8", "q4_0"))
# moec compile's flags for each moe-run dtype.
PLAN_FLAGS = {"f32": [], "bf16": ["--weight-dtype", "bf16"],
              "f16": ["--weight-dtype", "f16"],
              "int8": ["--weight-dtype", "int8"],
              "int4": ["--weight-dtype", "int4"],
              "int4a8": ["--weight-dtype", "int4", "--int8-activations"]}


def run(cmd, **kwargs):
    kwargs.setdefault("check", True)
    return subprocess.run([str(c) for c in cmd], **kwargs)


def nice(cmd):
    return ["nice", "-n", "19"] + list(cmd)


# --------------------------------------------------------------------------- #
# The checkpoint and moe-run's plans
# --------------------------------------------------------------------------- #


def make_checkpoint(hf_dir):
    # The tokenizer is written last: a run stopped before it starts over.
    if os.path.exists(os.path.join(hf_dir, "tokenizer.model")):
        return
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(initializer_range=0.02, **CONFIG)
    torch.manual_seed(0)
    model = MixtralForCausalLM(config).eval()
    os.makedirs(hf_dir, exist_ok=True)
    model.save_pretrained(hf_dir, safe_serialization=True)
    make_tokenizer(hf_dir)


def make_tokenizer(hf_dir):
    """A SentencePiece BPE model of a few hundred pieces, trained on the
    repository's documentation: the converter reads tokenizer.model and
    fills the rest of the 4096 ids with unused pieces."""
    import sentencepiece as spm

    text = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        text += [line.strip() for line in open(path) if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_prefix=os.path.join(hf_dir,
                                                                "tokenizer"),
        vocab_size=512, model_type="bpe", byte_fallback=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    os.remove(os.path.join(hf_dir, "tokenizer.vocab"))
    json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True,
               "add_eos_token": False, "bos_token": "<s>",
               "eos_token": "</s>", "unk_token": "<unk>"},
              open(os.path.join(hf_dir, "tokenizer_config.json"), "w"))


def export_pair(hf_dir, pair_dir):
    decode = os.path.join(pair_dir, "decode.onnx")
    if os.path.exists(decode):
        return decode, os.path.join(pair_dir, "prefill.onnx")
    import torch
    from transformers import MixtralForCausalLM
    from transformers.exporters import OnnxConfig, OnnxExporter

    lm = MixtralForCausalLM.from_pretrained(
        hf_dir, attn_implementation="eager").eval()
    sample = torch.randint(0, CONFIG["vocab_size"], (1, 16),
                           generator=torch.Generator().manual_seed(4))
    exported = OnnxExporter().export_for_generation(
        lm, {"input_ids": sample, "attention_mask": torch.ones_like(sample)},
        config=OnnxConfig(dynamic=True))
    exported.save_pretrained(pair_dir)
    return decode, os.path.join(pair_dir, "prefill.onnx")


def compile_plans(args, decode, prefill, dtypes):
    plans = {}
    moec = os.path.join(args.build, "bin", "moec")
    for dtype in dtypes:
        plan = os.path.join(args.models, f"mixtral_{dtype}.plan")
        if not os.path.exists(plan):
            run(nice([moec, "compile", decode, "--prefill", prefill,
                      "--max-seq", "1024", "-o", plan] + PLAN_FLAGS[dtype]))
        plans[dtype] = plan
    return plans


# --------------------------------------------------------------------------- #
# llama.cpp
# --------------------------------------------------------------------------- #


def llama_sources(args):
    """The sdist's vendored llama.cpp, and the commit its changelog names."""
    folder = args.llama_dir
    os.makedirs(folder, exist_ok=True)
    tars = glob.glob(os.path.join(folder, "llama_cpp_python-*.tar.gz"))
    if not tars:
        run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:",
             "--no-deps", "llama-cpp-python", "-d", folder])
        tars = glob.glob(os.path.join(folder, "llama_cpp_python-*.tar.gz"))
    tar = sorted(tars)[-1]
    sdist = tar[:-len(".tar.gz")]
    if not os.path.isdir(sdist):
        with tarfile.open(tar) as f:
            f.extractall(folder)
    changelog = open(os.path.join(sdist, "CHANGELOG.md")).read()
    match = re.search(r"llama\.cpp@([0-9a-f]{7,40})", changelog)
    return (os.path.join(sdist, "vendor", "llama.cpp"),
            os.path.basename(sdist), match.group(1) if match else "unknown")


def build_llama(args, src):
    """llama-bench, llama-server (bench/batch_bench.py's peer) and
    llama_greedy (nice'd; the build takes a while)."""
    build = os.path.join(args.llama_dir, "build")
    bench = os.path.join(build, "bin", "llama-bench")
    server = os.path.join(build, "bin", "llama-server")
    quantize = os.path.join(build, "bin", "llama-quantize")
    if not all(map(os.path.exists, (bench, server, quantize))):
        flags = []
        cpu = open("/proc/cpuinfo").read()
        if "amx_tile" in cpu:
            no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
            flags = [f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}"]
        run(nice(["cmake", "-S", src, "-B", build, "-G", "Ninja",
                  "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
                  "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=ON",
                  "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_OPENSSL=OFF",
                  "-DGGML_CCACHE=OFF"] + flags), stdout=subprocess.DEVNULL)
        run(nice(["ninja", "-C", build, "llama-bench", "llama-server",
                  "llama-quantize"]))
    greedy = os.path.join(build, "bin", "llama_greedy")
    if not os.path.exists(greedy):
        run(nice(["cc", "-O2", os.path.join(ROOT, "bench", "llama_greedy.c"),
                  "-I", os.path.join(src, "include"),
                  "-I", os.path.join(src, "ggml", "include"),
                  "-L", os.path.join(build, "bin"), "-lllama",
                  "-Wl,-rpath," + os.path.join(build, "bin"), "-o", greedy]))
    return bench, greedy


def convert(args, src, hf_dir):
    ggufs = {}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(src, "gguf-py"),
         os.path.join(args.llama_dir, "pydeps")]))
    for outtype in LLAMA_TYPES:
        gguf = os.path.join(args.models, f"mixtral_{outtype}.gguf")
        if not os.path.exists(gguf) and outtype in QUANTIZED_TYPES:
            quantize = os.path.join(args.llama_dir, "build", "bin",
                                    "llama-quantize")
            run(nice([quantize, ggufs["f32"], gguf, outtype]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elif not os.path.exists(gguf):
            run(nice([sys.executable, os.path.join(src, "convert_hf_to_gguf.py"),
                      hf_dir, "--outtype", outtype, "--outfile", gguf]),
                env=env, stdout=subprocess.DEVNULL)
        ggufs[outtype] = gguf
    return ggufs


# --------------------------------------------------------------------------- #
# Measurements
# --------------------------------------------------------------------------- #


# The steps of dense matrices: MatMul and Gemm (f32), Linear (narrowed,
# `moec compile --weight-dtype`), MatMulNBits (int4).
DENSE_OPS = ("MatMul", "Gemm", "Linear", "MatMulNBits")


def step_bytes(args, plan):
    """Weight bytes one decode step of the plan reads: every MatMul/Gemm/
    Linear weight, top-k of E experts of every Experts step, one embedding
    row."""
    moec = os.path.join(args.build, "bin", "moec")
    info = json.loads(run([moec, "inspect", plan, "--json"],
                          capture_output=True, text=True).stdout)
    schedule = info["schedules"][0]
    tensors = schedule["tensors"]
    dense = experts = 0
    top_k = CONFIG["num_experts_per_tok"] / CONFIG["num_local_experts"]
    for step in schedule["steps"]:
        weights = [tensors[i]["bytes"] for i in step["inputs"]
                   if tensors[i]["storage"] == "weight"]
        if step["op"] in DENSE_OPS:
            dense += sum(weights)
        elif step["op"] == "Experts":
            experts += sum(weights) * top_k
    return dense, experts + CONFIG["hidden_size"] * 4


def gguf_step_bytes(src, gguf):
    """The same for a GGUF: every tensor (norms included, a few KB), the
    embedding's as one row, experts scaled by top-k / E."""
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    from gguf import GGUFReader

    total = 0.0
    top_k = CONFIG["num_experts_per_tok"] / CONFIG["num_local_experts"]
    for t in GGUFReader(gguf).tensors:
        size = int(t.n_bytes)
        if t.name == "token_embd.weight":
            size //= CONFIG["vocab_size"]
        elif "_exps" in t.name:
            size *= top_k
        total += size
    return total


def moe_run_bench(binary, plan, threads, args, stats=None):
    cmd = [binary, plan, "--bench", args.reps, "--warmup", 1,
           "--prompt-tokens", args.prompt, "--max-new-tokens", args.gen,
           "--threads", threads]
    if stats:
        cmd += ["--stats", stats]
    out = run(cmd, capture_output=True, text=True).stdout
    rates = dict(re.findall(r"\|\s*(pp|tg) \d+\s*\|\s*([0-9.]+)", out))
    return float(rates["pp"]), float(rates["tg"])


def llama_run_bench(bench, gguf, threads, args):
    out = run([bench, "-m", gguf, "-p", args.prompt, "-n", args.gen,
               "-t", threads, "-r", args.reps, "-o", "json"],
              capture_output=True, text=True).stdout
    rows = json.loads(out)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    return pp, tg


def decode_ops(stats):
    """ms per decode step in MatMul/Gemm/Linear steps, in Experts, and the
    rest."""
    parts = {"dense": 0.0, "experts": 0.0, "rest": 0.0}
    for x in json.load(open(stats))["decode_steps_stats"]:
        key = ("dense" if x["op"] in DENSE_OPS else
               "experts" if x["op"] == "Experts" else "rest")
        parts[key] += x["mean_ms"]
    return parts


def read_bandwidth(threads, mib=1024, stream_bench=None):
    """The best of compare_ort.measure_bandwidth (numpy's maximum over
    disjoint slices), numpy matrix-vector products over the same bytes
    (BLAS's sgemv, the access of a decode step's dense matrices) and, given
    moe-stream-bench, its max-reduce on moe-run's own pool of `threads`
    (numpy's figures did not grow with a second thread on the AVX-512 EPYC),
    in bytes per second."""
    best = measure_bandwidth(threads, mib)
    a = np.ones((mib * 256, 1024), dtype=np.float32)
    x = np.ones(1024, dtype=np.float32)
    parts = np.array_split(a, threads)
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(5):
            start = time.perf_counter()
            list(pool.map(lambda part: part @ x, parts))
            best = max(best, a.nbytes / (time.perf_counter() - start))
    del a
    for _ in range(3 if stream_bench else 0):
        out = run([stream_bench, 64, 64, threads, "f32", 1, "auto", 1],
                  capture_output=True, text=True).stdout
        found = re.search(r"read bandwidth ([0-9.]+)", out)
        if found:
            best = max(best, float(found.group(1)) * 1e9)
    return best


def gemm_peak(stream_bench, threads, dtype="f32"):
    """FLOP/s of a compute-bound product on `threads` (256 rows of
    activations times a [2816, 1024] matrix): oneDNN's f32 sgemm, or with
    dtype "bf16" the bf16 matmul (activations rounded to bf16) that moe-run's
    expert blocks run for bf16 and int8 weights where the CPU has
    AVX512-BF16 (kernels/expert_gemm.h; where it has not, the f32 sgemm)."""
    kernel, width = ("gemm", 2) if dtype == "bf16" else ("sgemm", 4)
    best = 0.0
    for _ in range(3):
        out = run([stream_bench, 2816, 1024, threads, dtype, 256, kernel],
                  capture_output=True, text=True).stdout
        found = re.search(r"([0-9.]+) GB/s of weights", out)
        if found:
            # GB/s of the matrix: 2 * 256 flops per weight of `width` bytes.
            best = max(best, float(found.group(1)) * 1e9 / width * 2 * 256)
    return best


def prompt_roofline(args, plans, dtype, peaks, bandwidth):
    """pp tokens/s that a prompt of args.prompt tokens cannot pass: the
    larger of its multiply-adds (2 per weight a token touches: the f32
    plan's dense matrices and top-k experts) at the rates moe-run's kernels
    have for them (dense products in f32; experts in bf16 for bf16 and int8
    weights, `peaks["bf16"]`, else f32) and of the bytes the prompt reads
    (every dense matrix, and each expert a token of the prompt routes to:
    1 - (1 - k/E)^P of them with uniform routing) over the bandwidth."""
    dense32, experts32 = step_bytes(args, plans["f32"])
    dense_flops = 2 * dense32 / 4 * args.prompt
    expert_flops = 2 * experts32 / 4 * args.prompt
    expert_peak = peaks["bf16"] if dtype in ("bf16", "int8") else peaks["f32"]
    dense, experts = step_bytes(args, plans[dtype])
    k_over_e = CONFIG["num_experts_per_tok"] / CONFIG["num_local_experts"]
    touched = (1 - (1 - k_over_e) ** args.prompt) / k_over_e
    seconds = max(dense_flops / peaks["f32"] + expert_flops / expert_peak,
                  (dense + experts * touched) / bandwidth)
    return args.prompt / seconds


def decode_table(args, plans):
    """Step 1 of issue 33: moe-run binaries side by side on each plan."""
    binaries = [("build", os.path.join(args.build, "bin", "moe-run"))]
    binaries += [tuple(b.split("=", 1)) for b in args.moe_run]
    print(f"load average at start: {os.getloadavg()}", flush=True)
    stream_bench = os.path.join(args.build, "bin", "moe-stream-bench")
    bandwidth = {t: read_bandwidth(t, stream_bench=stream_bench)
                 for t in args.threads}
    print("read bandwidth: " + ", ".join(
        f"{t} thread(s) {bw / 1e9:.1f} GB/s" for t, bw in bandwidth.items()))
    print("| plan | threads | moe-run | tg t/s | ms/token | dense ms | "
          "experts ms | rest ms | MB/token | GB/s | % of bw |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dtype, plan in plans.items():
        dense, experts = step_bytes(args, plan)
        for threads in args.threads:
            # The binaries take turns, args.rounds times; each keeps its best
            # round (the least disturbed by other processes on the machine).
            best = {}
            for _ in range(args.rounds):
                for name, binary in binaries:
                    stats = os.path.join(args.models, "decode_stats.json")
                    _, tg = moe_run_bench(binary, plan, threads, args, stats)
                    parts = decode_ops(stats)
                    old = best.get(name)
                    best[name] = (max(tg, old[0]) if old else tg, {
                        k: min(v, old[1][k]) if old else v
                        for k, v in parts.items()})
            for name, _ in binaries:
                tg, parts = best[name]
                rate = (dense + experts) * tg
                print(f"| {dtype} | {threads} | {name} | {tg:.1f} | "
                      f"{1000 / tg:.2f} | {parts['dense']:.2f} | "
                      f"{parts['experts']:.2f} | {parts['rest']:.2f} | "
                      f"{(dense + experts) / 1e6:.1f} | {rate / 1e9:.1f} | "
                      f"{100 * rate / bandwidth[threads]:.0f} |", flush=True)
    bandwidth = {t: max(bw, read_bandwidth(t, stream_bench=stream_bench))
                 for t, bw in bandwidth.items()}
    print("read bandwidth at the end (best of both): " + ", ".join(
        f"{t} thread(s) {bw / 1e9:.1f} GB/s" for t, bw in bandwidth.items()))
    print(f"load average at end: {os.getloadavg()}", flush=True)


def greedy_check(args, plans, greedy, ggufs):
    prompt = [1] + list(np.random.default_rng(5).integers(
        3, CONFIG["vocab_size"], 15))
    ids = ",".join(map(str, prompt))
    moe = run([os.path.join(args.build, "bin", "moe-run"), plans["f32"],
               "--prompt-ids", ids, "--max-new-tokens", 16, "--threads", 1],
              capture_output=True, text=True).stdout.split()
    done = run([greedy, ggufs["f32"], 16, ids], capture_output=True,
               text=True)
    llama = done.stdout.strip().split(",")
    system_info = next((line for line in done.stderr.splitlines()
                        if line.startswith("system_info")), "")
    print(f"greedy ids after {ids}:\n  moe-run   {','.join(moe)}\n"
          f"  llama.cpp {','.join(llama)}")
    if moe != llama:
        sys.exit("llama_bench.py: the engines' greedy ids differ at f32")
    return system_info


def compare(args, src, plans, bench, greedy, ggufs, commit):
    system_info = greedy_check(args, plans, greedy, ggufs)
    print(f"llama.cpp {commit}: {system_info}")
    print("moe-run: streaming kernels x86-64-v3 (AVX2, FMA) clones or "
          "AVX-512 where present; GEMMs oneDNN sgemm (JIT by CPUID); CPU "
          "flags: " + " ".join(sorted(set(re.findall(
              r"\b(avx\w*|fma|f16c|amx\w*)\b",
              open("/proc/cpuinfo").read())))))
    print(f"load average at start: {os.getloadavg()}", flush=True)
    stream_bench = os.path.join(args.build, "bin", "moe-stream-bench")
    bandwidth = {t: 0.0 for t in args.threads}
    peak = {t: {"f32": 0.0, "bf16": 0.0} for t in args.threads}
    # The engines take turns, args.rounds times; each keeps its best pp and
    # tg (the runs least disturbed by other processes on the machine).
    best = {}

    def keep(key, rates):
        old = best.get(key, (0.0, 0.0))
        best[key] = (max(old[0], rates[0]), max(old[1], rates[1]))

    for _ in range(args.rounds):
        for threads in args.threads:
            # The machine's rates move from minute to minute: each round
            # measures them again and the best is kept.
            bandwidth[threads] = max(bandwidth[threads], read_bandwidth(
                threads, stream_bench=stream_bench))
            for kind in peak[threads]:
                peak[threads][kind] = max(peak[threads][kind], gemm_peak(
                    stream_bench, threads, kind))
            for dtype, outtype in PAIRS:
                if dtype in plans and outtype in ggufs:
                    keep(("moe", dtype, threads), moe_run_bench(
                        os.path.join(args.build, "bin", "moe-run"),
                        plans[dtype], threads, args))
                    keep(("llama", outtype, threads), llama_run_bench(
                        bench, ggufs[outtype], threads, args))
    rows = [(threads, dtype, outtype, best[("moe", dtype, threads)],
             best[("llama", outtype, threads)])
            for threads in args.threads for dtype, outtype in PAIRS
            if dtype in plans and outtype in ggufs]
    print(f"load average at end: {os.getloadavg()}")
    print("read bandwidth: " + ", ".join(
        f"{t} thread(s) {bw / 1e9:.1f} GB/s" for t, bw in bandwidth.items()))
    print("GEMM peaks (f32 sgemm / bf16 matmul): " + ", ".join(
        f"{t} thread(s) {p['f32'] / 1e9:.0f} / {p['bf16'] / 1e9:.0f} GFLOP/s"
        for t, p in peak.items()))
    moe_bytes = {d: sum(step_bytes(args, p)) for d, p in plans.items()}
    llama_bytes = {t: gguf_step_bytes(src, g) for t, g in ggufs.items()}
    print(f"\n`llama_bench.py --prompt {args.prompt} --gen {args.gen} "
          f"--reps {args.reps} --rounds {args.rounds}`\n")
    print("| threads | moe-run / llama.cpp | pp moe-run | pp llama.cpp | "
          "pp ratio | pp roofline | 2x llama.cpp, % of it | tg moe-run | "
          "tg llama.cpp | tg ratio | MB/token | tg % of bw |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for threads, dtype, outtype, (mpp, mtg), (lpp, ltg) in rows:
        mb, lb = moe_bytes[dtype], llama_bytes[outtype]
        bw = bandwidth[threads]
        # int4a8 prompts multiply int8 activations: no roofline here.
        roof = (prompt_roofline(args, plans, dtype, peak[threads], bw)
                if dtype != "int4a8" and "f32" in plans else None)
        roof_cells = (f"{roof:.0f} | {100 * 2 * lpp / roof:.0f}%" if roof
                      else "- | -")
        print(f"| {threads} | {dtype} / {outtype} | {mpp:.1f} | {lpp:.1f} | "
              f"{mpp / lpp:.2f} | {roof_cells} | {mtg:.1f} | {ltg:.1f} | "
              f"{mtg / ltg:.2f} | {mb / 1e6:.0f} / {lb / 1e6:.0f} | "
              f"{100 * mb * mtg / bw:.0f} / {100 * lb * ltg / bw:.0f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--gen", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dtypes", default="f32,bf16,int8,int4,int4a8")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each engine (with --decode-only: of "
                             "each moe-run binary), in turns; the best is "
                             "kept")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--models",
                        default=os.path.join(ROOT, "bench", "models", "llama"))
    parser.add_argument("--llama-dir", default=os.path.join(
        ROOT, "bench", "models", "llamacpp"),
        help="the sdist, its build and pydeps/ (sentencepiece for the "
             "converter: pip install --target DIR/pydeps sentencepiece)")
    parser.add_argument("--moe-run", action="append", default=[],
                        metavar="NAME=PATH",
                        help="with --decode-only: another moe-run binary to "
                             "time beside --build's")
    parser.add_argument("--decode-only", action="store_true",
                        help="only moe-run's decode (bytes per step over time "
                             "against the read bandwidth), no llama.cpp")
    args = parser.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    args.models = os.path.abspath(args.models)
    args.llama_dir = os.path.abspath(args.llama_dir)
    pydeps = os.path.join(args.llama_dir, "pydeps")
    sys.path.insert(0, pydeps)
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        run([sys.executable, "-m", "pip", "install", "--target", pydeps,
             "sentencepiece"])
        # pydeps did not exist when the path's finders were cached.
        importlib.invalidate_caches()
    hf_dir = os.path.join(args.models, "hf")
    make_checkpoint(hf_dir)
    decode, prefill = export_pair(hf_dir, os.path.join(args.models, "pair"))
    plans = compile_plans(args, decode, prefill, args.dtypes.split(","))
    if args.decode_only:
        return decode_table(args, plans)
    src, sdist, commit = llama_sources(args)
    bench, greedy = build_llama(args, src)
    ggufs = convert(args, src, hf_dir)
    compare(args, src, plans, bench, greedy, ggufs,
            f"{sdist} vendor {commit}")


if __name__ == "__main__":
    main()
