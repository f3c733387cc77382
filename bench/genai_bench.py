#!/usr/bin/env python3
"""Prefill and decode tokens/s of moe-run against onnxruntime-genai on one builder export.

  bench/genai_bench.py [--make] [--precision fp32,int4] [--threads 1,2]
      [--prompt 128] [--new-tokens 33] [--repeats 3] [--rounds 1]
      [--layers 2] [--accuracy-level 1,4]
      [--models bench/models/genai] [--build build]

Run with the export venv of examples/zoo/requirements-export-genai.txt (it
has onnxruntime-genai and the onnxruntime it needs).

--make builds the model first: a random-weight gpt-oss at gpt-oss-20b's layer
shape (hidden 2880, 64 query and 8 key/value heads of 64, 32 experts of 2880,
top-4, a sliding window of 128 on even layers) with --layers layers and a
vocabulary of 32000 (gpt-oss's 201088 would make the embedding and the LM
head most of the bytes of a two-layer model), through onnxruntime-genai's
model builder at each precision (`-p fp32|int4 -e cpu`, full caches for the
sliding layers: `--extra_options windowed_kv_cache=false`), into --models.
int4: the builder reads gpt-oss experts only from the MXFP4 tensors gpt-oss
ships, so the checkpoint's experts are first replaced by random MXFP4 blocks
(mxfp4_checkpoint); the builder writes them as int4 QMoE (blocks of 32) and
the rest as MatMulNBits, with each --accuracy-level (default 1: float
activations; 4, the builder's default: MatMulNBits with int8 activations in
onnxruntime and moe-run alike; the builder writes no accuracy_level on
QMoE, whose experts stay f32) into its own folder (`_acc4` for 4).

Then for each precision and thread count, on the same folder:
  moe-run   `moec compile FOLDER --max-seq P+N`, then `moe-run --bench
            --repeats --prompt-tokens P --max-new-tokens N --threads T`
            (llama-bench's table: pp P and tg N tokens/s);
  genai     og.Generator with intra_op_num_threads T (genai_config's
            session options), in a child process that exits before
            moe-run runs: the prompt's append_tokens (prefill) and
            N - 1 generate_next_token calls (decode), best of --repeats;
and prints the tokens/s of both, their ratio (moe-run over genai) and each
one's decode as a fraction of the memory roofline: the bytes a decode step
of the export must read (every weight but the unused experts' and the
embedding table's other rows, plus the caches at the mean position) over
the read bandwidth measured in the same run (compare_ort.py's
measure_bandwidth). --weight-dtype adds rows of moe-run plans whose expert
matrices moec narrows (bf16, int8: not the export's numerics).
--int8-activations adds, for the int4 exports, rows of moe-run plans compiled
with `moec compile --int8-activations` (every MatMulNBits and QMoE product
with int8 activations, as accuracy_level 4 on every node would ask: not
onnxruntime-genai's numerics for the builder's QMoE, which it computes with
f32 activations).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from compare_ort import measure_bandwidth  # noqa: E402

SHAPE = dict(vocab_size=32000, hidden_size=2880, intermediate_size=2880,
             num_attention_heads=64, num_key_value_heads=8, head_dim=64,
             num_local_experts=32, num_experts_per_tok=4, sliding_window=128)


def make(args, precision, level, folder):
    """Builds the random checkpoint once, then the builder export."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    hf_dir = os.path.join(args.models, f"hf_l{args.layers}")
    if not os.path.exists(os.path.join(hf_dir, "config.json")):
        config = GptOssConfig(
            num_hidden_layers=args.layers, max_position_embeddings=4096,
            layer_types=["sliding_attention" if i % 2 == 0 else
                         "full_attention" for i in range(args.layers)],
            eos_token_id=1, bos_token_id=2, pad_token_id=1, **SHAPE)
        torch.manual_seed(0)
        model = GptOssForCausalLM(config).eval()
        model.save_pretrained(hf_dir, safe_serialization=True)
        sys.path.insert(0, os.path.join(ROOT, "examples", "zoo", "genai"))
        from make_genai import tokenizer
        tokenizer(hf_dir, 512)
        del model
    options = ["windowed_kv_cache=false"]
    if precision == "int4":
        # The builder reads gpt-oss experts only from MXFP4 checkpoint
        # tensors (as gpt-oss ships), and writes them as int4 QMoE.
        hf_dir = mxfp4_checkpoint(hf_dir)
        options.append(f"accuracy_level={level}")
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder",
                    "-m", hf_dir, "-o", folder, "-p", precision, "-e", "cpu",
                    "--extra_options"] + options,
                   check=True, stdout=subprocess.DEVNULL)


def mxfp4_checkpoint(hf_dir):
    """A copy of the checkpoint with its experts replaced by random MXFP4
    blocks (uint8 [E, N, K / 32, 16] E2M1 codes, [E, N, K / 32] E8M0
    exponents 119..121), transformers' layout of gpt-oss checkpoints."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    out_dir = hf_dir + "_mxfp4"
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return out_dir
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(hf_dir):
        if name != "model.safetensors":
            shutil.copy(os.path.join(hf_dir, name), out_dir)
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    rng = np.random.default_rng(7)
    experts = config["num_local_experts"]
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    tensors = {}
    with safe_open(os.path.join(hf_dir, "model.safetensors"), "pt") as f:
        for key in f.keys():
            proj = key.rsplit(".", 1)[1]
            if ".mlp.experts." not in key or proj not in ("gate_up_proj",
                                                          "down_proj"):
                tensors[key] = f.get_tensor(key)
                continue
            n, k = (2 * inter, hidden) if proj == "gate_up_proj" else \
                (hidden, inter)
            tensors[key + "_blocks"] = torch.from_numpy(rng.integers(
                0, 256, size=(experts, n, k // 32, 16), dtype=np.uint8))
            tensors[key + "_scales"] = torch.from_numpy(rng.integers(
                119, 122, size=(experts, n, k // 32), dtype=np.uint8))
    save_file(tensors, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn",
                                   "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]}
    json.dump(config, open(os.path.join(out_dir, "config.json"), "w"),
              indent=1)
    return out_dir


def decode_bytes(folder, position):
    """Bytes one decode step reads at `position`: weights (one embedding
    row, k of E experts) and the caches."""
    import onnx

    config = json.load(open(os.path.join(folder, "genai_config.json")))
    decoder = config["model"]["decoder"]
    model = onnx.load(os.path.join(folder, decoder["filename"]),
                      load_external_data=False)
    total = 0
    k, experts = SHAPE["num_experts_per_tok"], SHAPE["num_local_experts"]
    for init in model.graph.initializer:
        size = int(np.prod(init.dims)) * {1: 4, 2: 1, 3: 1, 10: 2, 16: 2,
                                           7: 8, 6: 4}.get(init.data_type, 4)
        if "embed_tokens" in init.name:
            size //= SHAPE["vocab_size"]
        elif ".experts." in init.name or "experts" in init.name:
            size = size * k // experts
        total += size
    layers = decoder["num_hidden_layers"]
    cache = 2 * layers * decoder["num_key_value_heads"] * \
        decoder["head_size"] * position * 4
    return total + cache


def genai_rates(folder, threads, prompt, new_tokens, repeats):
    """genai_in_process in a process of its own, so that the model's memory
    (7 GB at fp32) is returned before moe-run loads its plan: held by this
    process, it left moe-run's 7 GB of huge pages short of memory (fp32 at
    2 threads: 35.8 tokens/s against 48 alone)."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(genai_in_process, folder, threads, prompt,
                           new_tokens, repeats).result()


def genai_in_process(folder, threads, prompt, new_tokens, repeats):
    import onnxruntime_genai as og

    with tempfile.TemporaryDirectory() as tmp:
        for name in os.listdir(folder):
            os.symlink(os.path.join(folder, name), os.path.join(tmp, name))
        config_path = os.path.join(tmp, "genai_config.json")
        config = json.load(open(os.path.join(folder, "genai_config.json")))
        options = config["model"]["decoder"]["session_options"]
        options["intra_op_num_threads"] = threads
        options["inter_op_num_threads"] = 1
        os.unlink(config_path)
        json.dump(config, open(config_path, "w"))
        model = og.Model(tmp)
        best_prefill = best_decode = float("inf")
        ids = list(np.random.default_rng(0).integers(
            3, SHAPE["vocab_size"], size=prompt))
        for _ in range(repeats + 1):
            params = og.GeneratorParams(model)
            params.set_search_options(max_length=prompt + new_tokens,
                                      do_sample=False)
            generator = og.Generator(model, params)
            start = time.perf_counter()
            generator.append_tokens(ids)
            prefilled = time.perf_counter()
            for _ in range(new_tokens - 1):
                generator.generate_next_token()
            done = time.perf_counter()
            best_prefill = min(best_prefill, prefilled - start)
            best_decode = min(best_decode, done - prefilled)
    return prompt / best_prefill, (new_tokens - 1) / best_decode


def moe_run_rates(args, folder, threads, plan):
    run = subprocess.run(
        [os.path.join(args.build, "bin", "moe-run"), plan, "--bench",
         str(args.repeats), "--prompt-tokens", str(args.prompt),
         "--max-new-tokens", str(args.new_tokens), "--threads", str(threads)],
        capture_output=True, text=True, check=True)
    rates = {}
    for line in run.stdout.splitlines():
        match = re.search(r"\b(pp|tg)\s*\d+\s*\|\s*([0-9.]+)", line)
        if match:
            rates[match.group(1)] = float(match.group(2))
    if len(rates) != 2:
        raise SystemExit(f"cannot read moe-run's table:\n{run.stdout}")
    return rates["pp"], rates["tg"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make", action="store_true")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=33)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--accuracy-level", default="1",
                        help="the int4 exports' accuracy_level "
                             "(comma-separated: one export each)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternating rounds of genai and moe-run per "
                             "thread count (best of all)")
    parser.add_argument("--weight-dtype", default="f32",
                        help="moec compile --weight-dtype for moe-run's "
                             "plans (comma-separated: one row each)")
    parser.add_argument("--int8-activations", action="store_true",
                        help="also int4 plans with moec compile "
                             "--int8-activations (one row each)")
    parser.add_argument("--tiny", action="store_true",
                        help="a tiny shape, to check the script itself")
    parser.add_argument("--models",
                        default=os.path.join(ROOT, "bench", "models", "genai"))
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    if args.tiny:
        SHAPE.update(vocab_size=512, hidden_size=64, intermediate_size=64,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                     num_local_experts=4, num_experts_per_tok=2,
                     sliding_window=8)
        args.models = os.path.join(args.models, "tiny")
    os.makedirs(args.models, exist_ok=True)
    threads_list = [int(t) for t in args.threads.split(",")]
    bandwidth = {t: measure_bandwidth(t) for t in threads_list}
    print("| export | moe-run experts | threads | moe-run pp | genai pp | x | "
          "moe-run tg | genai tg | x | moe-run tg roofline | "
          "genai tg roofline |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    levels = [int(level) for level in args.accuracy_level.split(",")]
    exports = [(precision, level) for precision in args.precision.split(",")
               for level in (levels if precision == "int4" else [0])]
    for precision, level in exports:
        folder = os.path.join(args.models, f"gpt_oss_l{args.layers}_{precision}")
        if level not in (0, 1):
            folder += f"_acc{level}"
        if args.make or not os.path.exists(folder):
            make(args, precision, level, folder)
        step_bytes = decode_bytes(folder, args.prompt + args.new_tokens // 2)
        genai = {}
        variants = [(dtype, False) for dtype in args.weight_dtype.split(",")]
        if precision == "int4" and args.int8_activations:
            variants.append(("f32", True))
        for dtype, int8 in variants:
            plan = f"{folder}.{dtype}{'.int8' if int8 else ''}.plan"
            subprocess.run([os.path.join(args.build, "bin", "moec"), "compile",
                            folder, "--max-seq",
                            str(args.prompt + args.new_tokens),
                            "--weight-dtype", dtype, "-o", plan, "--quiet"] +
                           (["--int8-activations"] if int8 else []),
                           check=True)
            for threads in threads_list:
                # Alternating rounds of both runtimes, best of each, so that
                # a change in the machine's load affects both alike.
                ours_pp = ours_tg = 0.0
                for _ in range(args.rounds):
                    if threads not in genai or args.rounds > 1:
                        pp, tg = genai_rates(folder, threads, args.prompt,
                                             args.new_tokens, args.repeats)
                        best = genai.get(threads, (0.0, 0.0))
                        genai[threads] = (max(best[0], pp), max(best[1], tg))
                    pp, tg = moe_run_rates(args, folder, threads, plan)
                    ours_pp, ours_tg = max(ours_pp, pp), max(ours_tg, tg)
                genai_pp, genai_tg = genai[threads]
                # The share of the measured read bandwidth that a decode
                # step's bytes at that rate take.
                ours_roof = ours_tg * step_bytes / bandwidth[threads]
                roofline = genai_tg * step_bytes / bandwidth[threads]
                # An int4 export's weights stay packed whatever
                # --weight-dtype says (it narrows f32 experts only).
                storage = ("packed int4" + (", int8 activations" if int8
                                            else "")
                           if precision == "int4" else dtype)
                export = (f"{precision} level {level}" if precision == "int4"
                          else precision)
                print(f"| {export} | {storage} | {threads} | {ours_pp:.1f} | "
                      f"{genai_pp:.1f} | {ours_pp / genai_pp:.2f} | "
                      f"{ours_tg:.2f} | {genai_tg:.2f} | "
                      f"{ours_tg / genai_tg:.2f} | {ours_roof:.0%} | "
                      f"{roofline:.0%} |", flush=True)
    print(f"read bandwidth: " + ", ".join(
        f"{t} thread{'s' if t > 1 else ''} {bandwidth[t] / 1e9:.1f} GB/s"
        for t in threads_list) + f"; decode step reads {step_bytes / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
