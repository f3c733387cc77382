#!/usr/bin/env python3
"""How far two f32 orders of summing a dot product land from the exact sum.

  sum_order_error.py [--k K] [--trials T]

Simulates, with numpy, a product of K random inputs by K random weights
summed with fused multiply-adds (each product exact, each addition rounded
to f32) in two orders: one running sum in input order (sgemm of one row,
onnxruntime's MLAS), and the f32 register tiles' (runtime/src/kernels/
tiles.h: per chunk of 1024 inputs two running 16-lane vectors over
alternate steps, added, summed across lanes as a tree, the chunks' sums
added in turn). Prints each order's rms distance from the f64 sum.
"""

import argparse

import numpy as np


def in_order(products):
    acc = np.float32(0)
    for p in products:
        acc = np.float32(np.float64(acc) + p)
    return float(acc)


def tile_order(products, chunk=1024, lanes=16, split=2):
    total = np.float32(0)
    for c0 in range(0, len(products), chunk):
        part = products[c0:c0 + chunk]
        running = np.zeros((split, lanes), dtype=np.float32)
        for step in range((len(part) + lanes - 1) // lanes):
            block = np.zeros(lanes)
            values = part[step * lanes:(step + 1) * lanes]
            block[:len(values)] = values
            u = step % split
            running[u] = (running[u].astype(np.float64) + block).astype(
                np.float32)
        v = running[0]
        for u in range(1, split):
            v = (v + running[u]).astype(np.float32)
        while len(v) > 4:
            half = len(v) // 2
            v = (v[:half] + v[half:]).astype(np.float32)
        lane_sum = np.float32(np.float32(v[0] + v[2]) + np.float32(v[1] + v[3]))
        total = np.float32(total + lane_sum) if c0 else lane_sum
    return float(total)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    errors = {"in order": [], "tiles": []}
    for _ in range(args.trials):
        x = rng.standard_normal(args.k).astype(np.float32)
        w = (rng.standard_normal(args.k) * 0.05).astype(np.float32)
        products = x.astype(np.float64) * w.astype(np.float64)
        exact = float(products.sum())
        errors["in order"].append(in_order(products) - exact)
        errors["tiles"].append(tile_order(products) - exact)
    rms = {name: float(np.sqrt(np.mean(np.square(e))))
           for name, e in errors.items()}
    print(f"K {args.k}, {args.trials} products: rms distance from the f64 "
          f"sum: in order {rms['in order']:.2e}, tiles {rms['tiles']:.2e} "
          f"({rms['in order'] / rms['tiles']:.1f}x)")


if __name__ == "__main__":
    main()
