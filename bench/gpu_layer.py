#!/usr/bin/env python3
"""GPU check, part 2: the roofline of one MoE layer on the GPU.

    python3 bench/gpu_layer.py [--experts 64 --top-k 4 --hidden 4096
                                --ffn 14336 --tokens 1,16,256,4096]

A Mixtral-style SwiGLU MoE layer in bf16 (router in fp32) timed in PyTorch in
two forms: the Hugging Face eager loop (per expert: index the routed tokens,
three GEMMs, index_add) and a sorted grouped form (tokens sorted by expert,
one GEMM chain per expert over a contiguous row group) — the form the moec
CUDA backend's grouped GEMM follows. Each time is the median of CUDA-event
timed replays after warm-up, with fresh random inputs (never zeros). Prints,
per token count, the time, the achieved HBM bandwidth (weights of the experts
that received a token, read once, plus activations) and TFLOP/s (2 x rows x
3 x hidden x ffn), next to the measured ceilings (device-to-device copy, a
large bf16 GEMM).

With --moe-run and --layer-plan (moe-layer-plan, bench/layer_plan), the same
layer (same sizes, bf16 expert weights, fp32 router) is written as a plan and
run by `moe-run --backend cuda --bench`: two rows per token count, the sum of
the steps' CUDA-event times ("moe-run", the GPU work) and the median of whole
runs ("moe-run+io", which adds copying the fp32 input in and the output out).
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile

import torch


def timed(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def ceilings():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    copy_ms = timed(lambda: b.copy_(a))
    del a, b
    m = 8192
    x = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    gemm_ms = timed(lambda: x @ y)
    return 2 * n / copy_ms / 1e9, 2 * m ** 3 / gemm_ms / 1e9


def moe_run_times(moe_run, plan, tokens, work):
    """[(form, ms)]: the steps' GPU time and the whole run, medians."""
    stats = os.path.join(work, f"moe_layer_{tokens}.json")
    out = os.path.join(work, f"moe_layer_{tokens}")
    os.makedirs(out, exist_ok=True)
    result = subprocess.run([moe_run, plan, "--backend", "cuda", "--tokens",
                             str(tokens), "--seed", "3", "--warmup", "3",
                             "--bench", "20" if tokens < 1024 else "5", "--stats", stats,
                             "--output-dir", out],
                            capture_output=True, text=True)
    if result.returncode != 0:
        print(f"moe-run failed ({result.returncode}):\n{result.stdout}"
              f"{result.stderr}")
        return []
    report = json.load(open(stats))
    on_gpu = all(s["op"].endswith("@cuda") for s in report["steps"])
    steps_ms = sum(s["mean_ms"] for s in report["steps"])
    form = "moe-run" if on_gpu else "moe-run*"
    if not on_gpu:
        print("  (* some steps ran on the host: " + ", ".join(
            s["op"] for s in report["steps"] if not s["op"].endswith("@cuda"))
            + ")")
    return [(form, steps_ms), ("+io", report["median_ms"])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ffn", type=int, default=14336)
    parser.add_argument("--tokens", default="1,16,256,4096")
    parser.add_argument("--moe-run", dest="moe_run")
    parser.add_argument("--layer-plan", dest="layer_plan")
    parser.add_argument("--work", default=tempfile.gettempdir(),
                        help="where the layer plan is written")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_layer: no CUDA device visible to PyTorch")
    torch.manual_seed(0)
    E, k, H, F = args.experts, args.top_k, args.hidden, args.ffn
    hbm, tflops = ceilings()
    print(f"ceilings: copy {hbm:.0f} GB/s, bf16 GEMM {tflops:.0f} TFLOP/s")
    dev = "cuda"
    scale = H ** -0.5
    w1 = torch.randn(E, F, H, dtype=torch.bfloat16, device=dev) * scale
    w3 = torch.randn(E, F, H, dtype=torch.bfloat16, device=dev) * scale
    w2 = torch.randn(E, H, F, dtype=torch.bfloat16, device=dev) * F ** -0.5
    gate = torch.randn(E, H, dtype=torch.float32, device=dev) * scale
    expert_bytes = 3 * H * F * 2

    def route(x):
        logits = x.float() @ gate.t()
        weights, idx = torch.topk(torch.softmax(logits, -1), k, dim=-1)
        return weights / weights.sum(-1, keepdim=True), idx

    def hf_loop(x):
        weights, idx = route(x)
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(idx, E).permute(2, 1, 0)
        for e in torch.nonzero(mask.sum((1, 2))).flatten().tolist():
            slot, tok = torch.where(mask[e])
            h = x[tok]
            a = torch.nn.functional.silu(h @ w1[e].t()) * (h @ w3[e].t())
            y = (a @ w2[e].t()) * weights[tok, slot, None].to(x.dtype)
            out.index_add_(0, tok, y)
        return out

    def grouped(x):
        weights, idx = route(x)
        flat = idx.flatten()
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=E).tolist()
        rows = x[order // k]
        out_rows = torch.empty_like(rows)
        start = 0
        for e, n in enumerate(counts):
            if n:
                h = rows[start:start + n]
                a = torch.nn.functional.silu(h @ w1[e].t()) * (h @ w3[e].t())
                out_rows[start:start + n] = a @ w2[e].t()
                start += n
        contrib = out_rows * weights.flatten()[order, None].to(x.dtype)
        out = torch.zeros_like(x)
        out.index_add_(0, order // k, contrib)
        return out

    plan = None
    if args.moe_run and args.layer_plan:
        plan = os.path.join(args.work, "moe_layer.cuda.bin")
        tokens_max = max(int(t) for t in args.tokens.split(","))
        subprocess.run([args.layer_plan, "-o", plan, "--experts", str(E),
                        "--top-k", str(k), "--hidden", str(H), "--ffn", str(F),
                        "--max-tokens", str(tokens_max), "--weight-dtype",
                        "bf16", "--backend", "cuda"], check=True)

    print(f"layer: E={E} k={k} hidden={H} ffn={F} bf16 weights "
          f"({E * expert_bytes / 1e9:.1f} GB)")
    print(f"{'tokens':>6} {'form':>8} {'ms':>9} {'GB/s':>7} {'%hbm':>5} "
          f"{'TFLOP/s':>8} {'%gemm':>6}")
    for T in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(T, H, dtype=torch.bfloat16, device=dev)
        _, idx = route(x)
        active = int(torch.unique(idx).numel())
        moved = active * expert_bytes + 2 * T * H * 2
        flops = 2 * T * k * 3 * H * F
        ref = None
        for form, fn in (("hf-loop", hf_loop), ("grouped", grouped)):
            y = fn(x)
            if ref is None:
                ref = y.float()
            else:
                err = ((y.float() - ref).norm() / ref.norm()).item()
                assert err < 2e-2, f"{form} differs from hf-loop: {err}"
            ms = timed(lambda: fn(x))
            gbs = moved / ms / 1e6
            tfs = flops / ms / 1e9
            print(f"{T:>6} {form:>8} {ms:>9.3f} {gbs:>7.0f} "
                  f"{100 * gbs / hbm:>5.1f} {tfs:>8.1f} "
                  f"{100 * tfs / tflops:>6.1f}")
        if plan:
            for form, ms in moe_run_times(args.moe_run, plan, T, args.work):
                gbs = moved / ms / 1e6
                tfs = flops / ms / 1e9
                print(f"{T:>6} {form:>8} {ms:>9.3f} {gbs:>7.0f} "
                      f"{100 * gbs / hbm:>5.1f} {tfs:>8.1f} "
                      f"{100 * tfs / tflops:>6.1f}")
        else:
            print(f"{T:>6} {'moe-run':>8}   (no --moe-run/--layer-plan given)")
    try:
        import onnxruntime
        providers = onnxruntime.get_available_providers()
        print("onnxruntime providers: " + ", ".join(providers))
    except ImportError:
        print("onnxruntime: not installed")


if __name__ == "__main__":
    main()
