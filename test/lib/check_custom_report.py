#!/usr/bin/env python3
"""Checks a compile report of a custom-track export against its design.

    check_custom_report.py MANIFEST NAME REPORT

MANIFEST is examples/zoo/custom/manifest.json, NAME an export in it, REPORT
the `moec compile --report` JSON of that export. Prints one line:

    NAME: generic                      (no MoE layer detected)
    NAME: detected, report matches     (every field of the design's gate)
    NAME: detected, report differs: FIELD is GOT, the design has WANT; ...

The design's gate is the ground truth export_custom.py records per design
(`gate` in the manifest): experts, k, scores, where the softmax is taken,
renormalisation, selection bias, groups, scaling, capacity, the expert
activation and the shared experts. Exits 1 when a detected layer differs,
or the export is not in the manifest.
"""

import json
import sys

# The manifest's activation names where they differ from the report's.
ACTIVATIONS = {"gelu_erf": "gelu"}


def expected_fields(sizes, gate):
    """The report fields a layer of this design must show."""
    want = {
        "experts": gate["num_experts"],
        "top_k": gate["top_k"],
        "hidden": sizes["hidden"],
        "ffn": sizes["ffn"],
        "score": gate["score"],
        "topk_before_softmax": gate["topk_before_softmax"],
        "selection_bias": gate.get("selection_bias", False),
        "groups": gate.get("n_group", 1),
        "topk_groups": gate.get("topk_group", 1),
        "scale": gate.get("routed_scaling_factor", 1),
        "capacity": gate.get("capacity"),
        "activation": ACTIVATIONS.get(gate["activation"], gate["activation"]),
        # DeepSeek's code writes its n shared experts as one MLP of width
        # n * F (the manifest's shared "ffn"): one network in the graph.
        "shared_experts": min(
            (gate.get("shared_experts") or {}).get("count", 0), 1),
    }
    # A softmax over the k chosen logits already sums to one: the router
    # then records no separate renormalisation. With a capacity, the
    # renormalisation is over the choices the capacity kept ("kept").
    if not gate["topk_before_softmax"] or gate["score"] != "softmax":
        want["normalize"] = gate["normalize"]
        if gate["normalize"] and gate.get("capacity") is not None:
            want["normalize"] = "kept"
    return want


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    manifest_path, name, report_path = sys.argv[1:]
    with open(manifest_path) as f:
        models = json.load(f)["models"]
    if name not in models:
        sys.exit(f"check_custom_report: {name} is not in {manifest_path}")
    with open(report_path) as f:
        layers = json.load(f)["moe_layers"]
    if not layers:
        print(f"{name}: generic")
        return
    model = models[name]
    want = expected_fields(model["sizes"], model["gate"])
    differences = []
    for i, layer in enumerate(layers):
        for field, value in want.items():
            got = layer.get(field)
            same = (abs(got - value) <= 1e-6 * abs(value)
                    if isinstance(value, float) and isinstance(got, (int, float))
                    else got == value)
            if not same:
                differences.append(f"layer {i}: {field} is {json.dumps(got)}, "
                                   f"the design has {json.dumps(value)}")
    if differences:
        print(f"{name}: detected, report differs: " + "; ".join(differences))
        sys.exit(1)
    print(f"{name}: detected, report matches")


if __name__ == "__main__":
    main()
