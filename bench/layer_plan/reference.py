#!/usr/bin/env python3
"""The layer moe-layer-plan writes, recomputed in numpy from the same seeds.

    python3 bench/layer_plan/reference.py --plan-args "E K H F SEED DTYPE" \
        --input x.npy --output y.npy [--check y_run.npy]

Rebuilds the weights exactly as moe-layer-plan makes them (splitmix64 noise,
rounded to bf16/f16 when asked), runs gate -> softmax top-k -> renormalised
SwiGLU experts -> weighted sum in float64 and, with --check, compares a
moe-run output against it (max abs error over max |ref|, tolerance --rtol,
1e-5 by default; bf16 plans need 1e-2 on CPUs with AVX512-BF16, whose GEMM
blocks round the activations to bf16 too).
Small sizes only: it is the check of the tool, not a benchmark.
"""

import argparse
import sys

import numpy as np

M64 = (1 << 64) - 1


def noise(seed, stream, count):
    i = np.arange(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
             + np.uint64(stream) * np.uint64(0xD1B54A32D192ED03)
             + i + np.uint64(1))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return ((z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 / 16777216.0)
            - np.float32(1.0))


def round_to(values, dtype):
    values = values.astype(np.float32)
    if dtype == "f16":
        return values.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        bits = values.view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        return bits.astype(np.uint32).view(np.float32)
    return values


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, required=True)
    parser.add_argument("--top-k", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--ffn", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--weight-dtype", default="bf16")
    parser.add_argument("--input", required=True)
    parser.add_argument("--check", required=True)
    parser.add_argument("--rtol", type=float, default=1e-5)
    args = parser.parse_args()
    E, K, H, F = args.experts, args.top_k, args.hidden, args.ffn
    s = args.seed
    gate = (noise(s, 0, H * E) / np.float32(np.sqrt(np.float32(H)))).reshape(H, E)
    w1 = round_to(noise(s, 1, E * F * H) * np.float32(1 / np.sqrt(np.float32(H))),
                  args.weight_dtype).reshape(E, F, H)
    w3 = round_to(noise(s, 3, E * F * H) * np.float32(1 / np.sqrt(np.float32(H))),
                  args.weight_dtype).reshape(E, F, H)
    w2 = round_to(noise(s, 2, E * H * F) * np.float32(1 / np.sqrt(np.float32(F))),
                  args.weight_dtype).reshape(E, H, F)
    x = np.load(args.input).astype(np.float64)
    logits = x @ gate.astype(np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    top = np.argsort(-p, axis=-1, kind="stable")[:, :K]
    w = np.take_along_axis(p, top, -1)
    w /= w.sum(-1, keepdims=True)
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(K):
            e = top[t, j]
            g = w1[e] @ x[t]
            a = g / (1 + np.exp(-g)) * (w3[e] @ x[t])
            y[t] += w[t, j] * (w2[e] @ a)
    got = np.load(args.check).astype(np.float64)
    err = np.abs(got - y).max() / max(1e-30, np.abs(y).max())
    print(f"layer reference: max abs error / max |ref| = {err:.3g}")
    sys.exit(0 if got.shape == y.shape and err <= args.rtol else 1)


if __name__ == "__main__":
    main()
