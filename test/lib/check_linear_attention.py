#!/usr/bin/env python3
"""Checks moe-run's LinearAttention against onnxruntime's recurrence in numpy.

  check_linear_attention.py inputs DIR       writes q, k, v, g, beta and
                                             past_state .npy files
  check_linear_attention.py compare DIR OUT  compares OUT/out.npy and
                                             OUT/present_state.npy

The sizes are gen_contrib_attention.py's "linear" model's (2 query/key heads
of 16, 4 value heads of 16). The reference follows onnxruntime's CPU kernel
(contrib_ops/cpu/bert/linear_attention.cc, update_rule "gated_delta"): per
batch and value head h, reading query head h * Hq / Hv and key head
h / (Hv / Hk), for each token in order: S *= exp(g); delta = beta (v - S^T k);
S += k delta^T; out = scale S^T q.
"""

import sys

import numpy as np

B, S, QH, VH, DK, DV = 2, 5, 2, 4, 16, 16
SCALE = 1.0


def inputs():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((B, S, QH * DK)).astype(np.float32)
    k = rng.standard_normal((B, S, QH, DK))
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)
    v = rng.standard_normal((B, S, VH * DV)).astype(np.float32)
    g = -np.abs(rng.standard_normal((B, S, VH))).astype(np.float32)
    beta = (1 / (1 + np.exp(-rng.standard_normal((B, S, VH))))).astype(
        np.float32)
    state = rng.standard_normal((B, VH, DK, DV)).astype(np.float32)
    return dict(q=q, k=k.reshape(B, S, QH * DK), v=v, g=g, beta=beta,
                past_state=state)


def reference(x):
    out = np.zeros((B, S, VH * DV))
    state = x["past_state"].astype(np.float64)
    for b in range(B):
        for h in range(VH):
            hq, hk = h * QH // VH, h // (VH // QH)
            m = state[b, h]
            for t in range(S):
                qt = x["q"][b, t, hq * DK:(hq + 1) * DK]
                kt = x["k"][b, t, hk * DK:(hk + 1) * DK]
                vt = x["v"][b, t, h * DV:(h + 1) * DV]
                m *= np.exp(x["g"][b, t, h])
                delta = x["beta"][b, t, h] * (vt - m.T @ kt)
                m += np.outer(kt, delta)
                out[b, t, h * DV:(h + 1) * DV] = SCALE * (m.T @ qt)
    return out, state


def main():
    x = inputs()
    if sys.argv[1] == "inputs":
        for name, array in x.items():
            np.save(f"{sys.argv[2]}/{name}.npy", array)
        return
    out, state = reference(x)
    got_out = np.load(f"{sys.argv[3]}/out.npy")
    got_state = np.load(f"{sys.argv[3]}/present_state.npy")
    err = max(np.abs(got_out - out).max(), np.abs(got_state - state).max())
    print(f"max error {err:.2e}:", "ok" if err < 1e-4 else "MISMATCH")


if __name__ == "__main__":
    main()
