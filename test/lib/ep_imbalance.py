#!/usr/bin/env python3
"""Compares the device load imbalance of `moe-run --stats` files of one model
run on the same inputs under different expert placements.

    ep_imbalance.py BASELINE.json PLACED.json [PLACED.json ...]

Each file is the --stats JSON of a multi-device run. For every file it prints
the per-layer rows each device's experts computed and the imbalance (largest
over mean) and checks that the layer stats are consistent: the tokens per
expert (merged over the devices) equal the routers' assignments and add up
to the devices' rows. Every PLACED file must run the same routing as the
baseline (equal tokens_per_expert) with a strictly lower device imbalance in
every layer. Exits 1 on any failure.

    ep_imbalance.py --same-routing A.json B.json

checks instead that two runs (say a 1-device and a 4-device one) report the
same tokens_per_expert in every layer, so either can serve as the routing
profile of `moec compile --routing-profile`.
"""

import json
import sys


def layers(path):
    with open(path) as f:
        return json.load(f)["moe_layers"]


def check_consistent(path, stats):
    problems = []
    for i, layer in enumerate(stats):
        tokens = layer["tokens_per_expert"]
        routed = layer.get("routed_per_expert")
        if routed is not None and routed != tokens:
            problems.append(f"{path}: layer {i}: tokens_per_expert {tokens} "
                            f"!= routed_per_expert {routed}")
        if "device_rows" in layer and sum(layer["device_rows"]) != sum(tokens):
            problems.append(f"{path}: layer {i}: device_rows "
                            f"{layer['device_rows']} do not add up to "
                            f"{sum(tokens)} assignments")
    return problems


def main(argv):
    if len(argv) == 3 and argv[0] == "--same-routing":
        a, b = layers(argv[1]), layers(argv[2])
        ta = [l["tokens_per_expert"] for l in a]
        tb = [l["tokens_per_expert"] for l in b]
        if ta != tb:
            print(f"MISMATCH routing: {argv[1]} {ta} vs {argv[2]} {tb}")
            return 1
        print(f"ok same routing: {ta}")
        return 0
    if len(argv) < 2:
        print(__doc__)
        return 2

    base = layers(argv[0])
    problems = check_consistent(argv[0], base)
    for i, layer in enumerate(base):
        print(f"baseline layer {i}: device rows {layer['device_rows']} "
              f"imbalance {layer['device_imbalance']}")
    for path in argv[1:]:
        placed = layers(path)
        problems += check_consistent(path, placed)
        if len(placed) != len(base):
            problems.append(f"{path}: {len(placed)} layers, baseline "
                            f"{len(base)}")
            continue
        for i, (b, p) in enumerate(zip(base, placed)):
            if p["tokens_per_expert"] != b["tokens_per_expert"]:
                problems.append(f"{path}: layer {i} routed differently: "
                                f"{p['tokens_per_expert']} vs "
                                f"{b['tokens_per_expert']}")
            better = p["device_imbalance"] < b["device_imbalance"]
            print(f"{'ok' if better else 'NOT LOWER'} {path} layer {i}: "
                  f"device rows {p['device_rows']} imbalance "
                  f"{p['device_imbalance']} (baseline "
                  f"{b['device_imbalance']})")
            if not better:
                problems.append(f"{path}: layer {i} imbalance not lower")
    for problem in problems:
        print(f"MISMATCH {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
