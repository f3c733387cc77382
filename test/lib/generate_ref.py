#!/usr/bin/env python3
"""Reference generation loop in onnxruntime, and moe-run's checks against it.

Runs a generation pair (prefill and decode ONNX graphs, transformers 5.x
`export_for_generation` naming or any other: the caches are found as moec
finds them, a decode input concatenated into a decode output of the same
shape but one longer) token by token with onnxruntime: prefill once, then
decode steps feeding each step's present caches back as the next step's past.
Tokens are chosen greedily (np.argmax) or, with --temperature, by sample(),
a numpy/Python reimplementation of moert::Sampler (docs/cli.md, "Sampling").

  generate_ref.py --decode D.onnx [--prefill P.onnx] --prompt-ids 3,14,15 \
      --max-new-tokens 8 --compare DIR [--temperature T --top-k K \
      --top-p P --seed S]

compares DIR/tokens.npy (moe-run's new ids) with the reference's: equal, and
DIR/logits.npy (the logits each id was drawn from) close to onnxruntime's at
every step (1e-5 relative, 1e-5 absolute). With sampling it also checks that
the sampler, given moe-run's own logits, draws moe-run's ids.
"""

import argparse
import math
import os
import sys

import numpy as np
import onnxruntime as ort

MASK64 = (1 << 64) - 1


class SplitMix64:
    """moert::Sampler's generator: splitmix64, doubles from its top 53 bits."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def uniform(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        return (z >> 11) * 2.0**-53


def sample(logits, temperature, top_k, top_p, rng):
    """The documented sampling algorithm, step by step in float64."""
    logits = [float(x) for x in logits]
    vocab = len(logits)
    if temperature == 0 or top_k == 1:
        return int(np.argmax(np.asarray(logits)))
    order = sorted(range(vocab), key=lambda i: (-logits[i], i))
    k = min(top_k, vocab) if top_k > 0 else vocab
    order = order[:k]
    top = logits[order[0]] / temperature
    weights = [math.exp(logits[i] / temperature - top) for i in order]
    total = 0.0
    for w in weights:
        total += w
    n = k
    if top_p < 1:
        acc = 0.0
        for i, w in enumerate(weights):
            acc += w
            if acc >= top_p * total:
                n = i + 1
                break
        total = 0.0
        for w in weights[:n]:
            total += w
    target = rng.uniform() * total
    acc = 0.0
    for i in range(n):
        acc += weights[i]
        if target < acc:
            return order[i]
    return order[n - 1]


def find_pairs(decode):
    """(past input, present output) names of the decode graph's caches."""
    graph = decode.graph
    inputs = {i.name for i in graph.input}
    outputs = {o.name for o in graph.output}
    pairs = []
    for node in graph.node:
        if node.op_type != "Concat" or len(node.input) < 2:
            continue
        if node.input[0] in inputs and node.output[0] in outputs:
            pairs.append((node.input[0], node.output[0]))
    return pairs


def stem(name):
    for prefix in ("input.", "output.", "past_key_values.", "present.",
                   "past.", "past_", "present_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def reference(args):
    import onnx

    decode_model = onnx.load(args.decode, load_external_data=False)
    pairs = find_pairs(decode_model)
    assert pairs, "no cache pairs in " + args.decode
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    decode = ort.InferenceSession(args.decode, options,
                                  providers=["CPUExecutionProvider"])
    prompt = [int(x) for x in args.prompt_ids.split(",")]
    n = len(prompt)
    feeds = {"input_ids": np.array([prompt], dtype=np.int64),
             "position_ids": np.arange(n, dtype=np.int64)[None, :]}
    if args.prefill:
        prefill = ort.InferenceSession(args.prefill, options,
                                       providers=["CPUExecutionProvider"])
        prefill_outputs = [o.name for o in prefill.get_outputs()]
        values = dict(zip(prefill_outputs, prefill.run(None, feeds)))
        caches = {past: values[next(o for o in prefill_outputs
                                    if stem(o) == stem(present))]
                  for past, present in pairs}
    else:
        # One graph: the prompt runs with empty pasts.
        shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
                  for i in decode_model.graph.input}
        for past, _ in pairs:
            # The symbolic past dimension reads 0: an empty past.
            feeds[past] = np.zeros(shapes[past], dtype=np.float32)
        names = [o.name for o in decode.get_outputs()]
        values = dict(zip(names, decode.run(None, feeds)))
        caches = {past: values[present] for past, present in pairs}
    logits = values["logits"][0, -1]
    rng = SplitMix64(args.seed)
    tokens, rows = [], []
    while True:
        token = sample(logits, args.temperature, args.top_k, args.top_p, rng)
        tokens.append(token)
        rows.append(logits)
        if len(tokens) == args.max_new_tokens:
            break
        feeds = {"input_ids": np.array([[token]], dtype=np.int64),
                 "position_ids": np.array([[n]], dtype=np.int64)}
        feeds.update(caches)
        names = [o.name for o in decode.get_outputs()]
        values = dict(zip(names, decode.run(None, feeds)))
        caches = {past: values[present] for past, present in pairs}
        logits = values["logits"][0, -1]
        n += 1
    return np.array(tokens, dtype=np.int64), np.stack(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode", required=True)
    parser.add_argument("--prefill", help="none: one graph runs the prompt")
    parser.add_argument("--prompt-ids", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", required=True,
                        help="moe-run's --output-dir")
    args = parser.parse_args()

    got = np.load(os.path.join(args.compare, "tokens.npy"))
    got_logits = np.load(os.path.join(args.compare, "logits.npy"))
    assert got.dtype == np.int64 and got.ndim == 1, (got.dtype, got.shape)
    want, want_logits = reference(args)
    ok = True
    if args.temperature > 0:
        # The sampler alone, over moe-run's own logits: no float noise.
        rng = SplitMix64(args.seed)
        redrawn = [sample(row, args.temperature, args.top_k, args.top_p, rng)
                   for row in got_logits]
        same = redrawn == got.tolist()
        print(("ok" if same else "FAIL") +
              f" sampler: numpy reimplementation draws {redrawn}")
        ok &= same
    same = got.tolist() == want.tolist()
    print(("ok" if same else "FAIL") +
          f" tokens: moe-run {got.tolist()} onnxruntime {want.tolist()}")
    ok &= same
    if same:
        err = np.abs(got_logits - want_logits)
        tol = 1e-5 + 1e-5 * np.abs(want_logits)
        close = bool(np.all(err <= tol))
        print(("ok" if close else "FAIL") +
              f" logits: {len(got)} steps, max abs error {err.max():.3g}, "
              f"final step max abs error {err[-1].max():.3g}")
        ok &= close
    print("generate: " + ("matches onnxruntime" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
