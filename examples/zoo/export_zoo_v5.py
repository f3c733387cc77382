#!/usr/bin/env python3
"""Exports the zoo's "v5-day0" track: today's exporters on transformers 5.x.

export_zoo.py pins each MoE form to the release that produces it; this track
instead takes what a user of the current releases gets (torch 2.15,
transformers 5.24, onnxscript 0.7), for every MoE architecture in
`transformers.models`, through every exporter that exists:

- `dynamo`: torch.onnx.export(dynamo=True), torch's default, on the block
  with its default experts implementation (grouped_mm), then with batched_mm
  when grouped_mm does not export;
- `torchscript`: torch.onnx.export(dynamo=False) on the same block;
- `hf`: transformers.exporters.OnnxExporter (the exporter transformers ships,
  which translates grouped_mm into per-expert Range segments) on the block;
- three whole CausalLMs through OnnxExporter (logits and KV cache outputs),
  and one OnnxExporter.export_for_generation pair (prefill and decode).

Every model is a tiny random-weight config (hidden 64, 4 experts, 2 layers
for whole models) built with fixed seeds on the CPU. Next to each fixture,
<name>.npz holds seeded inputs at 1, 7 and 64 tokens and torch's outputs for
them, so that tests compare moec with torch without torch installed. The
script records whether onnxruntime agrees with torch; a disagreement is the
exporter's, listed in README.md and manifest_v5.json, never fitted.

    .venv-export-v5/bin/python examples/zoo/export_zoo_v5.py [--only NAME...]

Results go to examples/zoo/v5/manifest.json (merged, like export_zoo.py's).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
import traceback
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

# export_zoo.py's weight init (matrices N(0, 0.25), vectors N(0, 0.1)), so
# that tiny layers' outputs are O(1).
from export_zoo import init_params

ZOO_DIR = Path(__file__).resolve().parent
OUT_DIR = ZOO_DIR / "v5"
REPO_ROOT = ZOO_DIR.parent.parent
MANIFEST = OUT_DIR / "manifest.json"

TORCH_VERSION = "2.15.0"
TRANSFORMERS_VERSION = "5.24.0"
TOKENS = (1, 7, 64)
SEED = 100
# |ort - torch| <= PARITY_TOLERANCE * max(1, max |torch|), as export_zoo.py.
PARITY_TOLERANCE = 1e-4
MACHINE_SPECIFIC_METADATA = ("pkg.torch.onnx.stack_trace",)

HIDDEN, FFN, EXPERTS, TOP_K = 64, 32, 4, 2


# --------------------------------------------------------------------------- #
# Architectures: config and MoE block class of each
# --------------------------------------------------------------------------- #


def arch_configs():
    """name -> (config, block class) for every MoE architecture of this track."""
    T = transformers
    m = transformers.models
    common = dict(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=128, max_position_embeddings=128, head_dim=16)
    return {
        "mixtral": (T.MixtralConfig(intermediate_size=FFN, num_local_experts=EXPERTS,
                                    num_experts_per_tok=TOP_K, **common),
                    m.mixtral.modeling_mixtral.MixtralSparseMoeBlock),
        "qwen2_moe": (T.Qwen2MoeConfig(moe_intermediate_size=FFN, shared_expert_intermediate_size=FFN,
                                       intermediate_size=FFN, num_experts=EXPERTS, num_experts_per_tok=TOP_K,
                                       norm_topk_prob=False, **common),
                      m.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock),
        "qwen3_moe": (T.Qwen3MoeConfig(moe_intermediate_size=FFN, intermediate_size=FFN, num_experts=EXPERTS,
                                       num_experts_per_tok=TOP_K, norm_topk_prob=True, **common),
                      m.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock),
        "deepseek_v3": (T.DeepseekV3Config(moe_intermediate_size=FFN, intermediate_size=FFN, n_routed_experts=8,
                                           num_experts_per_tok=TOP_K, n_group=4, topk_group=2,
                                           n_shared_experts=1, routed_scaling_factor=2.5, first_k_dense_replace=0,
                                           q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8,
                                           qk_nope_head_dim=8, v_head_dim=16,
                                           **{k: v for k, v in common.items() if k != "head_dim"}),
                        m.deepseek_v3.modeling_deepseek_v3.DeepseekV3MoE),
        "gpt_oss": (T.GptOssConfig(intermediate_size=FFN, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K,
                                   **common),
                    m.gpt_oss.modeling_gpt_oss.GptOssMLP),
        "olmoe": (T.OlmoeConfig(intermediate_size=FFN, num_experts=EXPERTS, num_experts_per_tok=TOP_K,
                                **{k: v for k, v in common.items() if k != "head_dim"}),
                  m.olmoe.modeling_olmoe.OlmoeSparseMoeBlock),
        "granitemoe": (T.GraniteMoeConfig(intermediate_size=FFN, num_local_experts=EXPERTS,
                                          num_experts_per_tok=TOP_K,
                                          **{k: v for k, v in common.items() if k != "head_dim"}),
                       m.granitemoe.modeling_granitemoe.GraniteMoeMoE),
        "phimoe": (T.PhimoeConfig(intermediate_size=FFN, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K,
                                  **{k: v for k, v in common.items() if k != "head_dim"}),
                   m.phimoe.modeling_phimoe.PhimoeSparseMoeBlock),
        "llama4": (T.Llama4TextConfig(intermediate_size=FFN, intermediate_size_mlp=FFN,
                                      num_local_experts=EXPERTS, num_experts_per_tok=1, **common),
                   m.llama4.modeling_llama4.Llama4TextMoe),
        "dbrx": (T.DbrxConfig(d_model=HIDDEN, n_heads=4, n_layers=2, max_seq_len=128, vocab_size=128,
                              ffn_config={"ffn_hidden_size": FFN, "moe_num_experts": EXPERTS,
                                          "moe_top_k": TOP_K},
                              attn_config={"kv_n_heads": 2}),
                 m.dbrx.modeling_dbrx.DbrxFFN),
        # Shared experts of other forms: AFMoE adds a SwiGLU of twice the
        # routed width, computed on the flattened tokens, before the routed
        # sum; Aria adds one after it, on the flat tokens viewed again as
        # [B, S, H]; GraniteMoeShared's decoder layer adds a SwiGLU of another
        # width with one fused gate/up projection.
        "afmoe": (T.AfmoeConfig(moe_intermediate_size=FFN, intermediate_size=FFN, num_experts=EXPERTS,
                                num_experts_per_tok=TOP_K, num_shared_experts=2, route_scale=2.5,
                                num_dense_layers=0, **common),
                  m.afmoe.modeling_afmoe.AfmoeSparseMoeBlock),
        "aria": (T.AriaTextConfig(intermediate_size=FFN, moe_num_experts=EXPERTS, moe_topk=TOP_K,
                                  moe_num_shared_experts=2, **common),
                 m.aria.modeling_aria.AriaTextMoELayer),
        "granitemoeshared": (T.GraniteMoeSharedConfig(intermediate_size=FFN, num_local_experts=EXPERTS,
                                                      num_experts_per_tok=TOP_K, shared_intermediate_size=48,
                                                      **{k: v for k, v in common.items() if k != "head_dim"}),
                             GraniteMoeSharedBlock),
    }


class GraniteMoeSharedBlock(torch.nn.Module):
    """GraniteMoeShared's MoE and the shared MLP its decoder layer adds to it
    (GraniteMoeSharedDecoderLayer: `block_sparse_moe(x) + shared_mlp(x)`),
    which has no module of its own."""

    def __init__(self, config):
        super().__init__()
        m = transformers.models.granitemoeshared.modeling_granitemoeshared
        self.block_sparse_moe = m.GraniteMoeSharedMoE(config)
        self.shared_mlp = m.GraniteMoeSharedMLP(config)

    def forward(self, hidden_states):
        return self.block_sparse_moe(hidden_states) + self.shared_mlp(hidden_states)

    # The module whose experts dispatch on experts_implementation.
    experts_module = "transformers.models.granitemoeshared.modeling_granitemoeshared"


class Block(torch.nn.Module):
    """An MoE block as hidden_states [batch, seq, H] -> output [batch, seq, H]."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, hidden_states):
        out = self.block(hidden_states)
        out = out[0] if isinstance(out, tuple) else out
        return out.reshape(hidden_states.shape)


def make_block(name: str, experts_implementation: str):
    cfg, cls = arch_configs()[name]
    if experts_implementation != "own forward":
        cfg._experts_implementation = experts_implementation
    torch.manual_seed(1)
    block = init_params(cls(cfg), seed=1)
    return Block(block).eval()


def block_inputs():
    gen = torch.Generator().manual_seed(SEED)
    return {t: torch.randn(1, t, HIDDEN, generator=gen) for t in TOKENS}


# --------------------------------------------------------------------------- #
# Exporters
# --------------------------------------------------------------------------- #


def export_dynamo(module, sample, path):
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    program = torch.onnx.export(module, (sample,), dynamo=True, input_names=["hidden_states"],
                                output_names=["output"], dynamic_shapes=({0: batch, 1: seq},), verbose=False)
    program.save(str(path))


def export_torchscript(module, sample, path):
    torch.onnx.export(module, (sample,), str(path), dynamo=False, opset_version=17,
                      input_names=["hidden_states"], output_names=["output"],
                      dynamic_axes={"hidden_states": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}})


def export_hf(module, sample, path):
    from transformers.exporters import OnnxConfig, OnnxExporter

    exported = OnnxExporter().export(module, {"hidden_states": sample}, config=OnnxConfig(dynamic=True))
    import onnx_ir

    onnx_ir.save(exported.program if hasattr(exported, "program") else exported["model"].program, str(path))


def clean_and_inline(path: Path):
    """Weights inline, machine-specific metadata dropped (export_zoo.py's rule)."""
    model = onnx.load(str(path), load_external_data=True)
    for node in model.graph.node:
        keep = [p for p in node.metadata_props if p.key not in MACHINE_SPECIFIC_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    data = path.with_name(path.name + ".data")
    onnx.save(model, str(path))
    if data.exists():
        data.unlink()
    return model


def run_ort(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return names, session.run(names, feeds)


def parity(want: np.ndarray, got: np.ndarray):
    if want.shape != got.shape:
        return {"ok": False, "error": f"shape {list(got.shape)} != torch {list(want.shape)}"}
    err = float(np.max(np.abs(want.astype(np.float64) - got))) if want.size else 0.0
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    return {"max_abs": err, "ok": err <= PARITY_TOLERANCE * scale}


def describe(model: onnx.ModelProto, path: Path) -> dict:
    def shape(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    return {
        "file": str(path.relative_to(REPO_ROOT)),
        "size_bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "ir_version": model.ir_version,
        "inputs": [{"name": i.name, "shape": shape(i)} for i in model.graph.input],
        "outputs": [{"name": o.name, "shape": shape(o)} for o in model.graph.output],
        "nodes": len(model.graph.node),
        "op_counts": dict(sorted(Counter(n.op_type for n in model.graph.node).items())),
    }


def uses_experts_interface(cls) -> bool:
    """Whether the architecture's experts dispatch on experts_implementation
    (@use_experts_implementation); DBRX and Llama 4 keep their own forward."""
    import importlib
    import inspect

    module = importlib.import_module(getattr(cls, "experts_module", cls.__module__))
    return "use_experts_implementation" in inspect.getsource(module)


def save_reference(entry: str, path: Path, record: dict, cases: dict):
    """Writes <entry>.npz (cases: tokens -> (feeds, torch outputs by name))
    and records onnxruntime's agreement with torch at each token count."""
    arrays, checks = {}, {}
    for t, (feeds, want) in cases.items():
        for k, v in {**feeds, **want}.items():
            arrays[f"{k}_t{t}"] = v
        try:
            names, got = run_ort(path, feeds)
            per = [parity(want[n], g) for n, g in zip(names, got)]
            checks[str(t)] = {"ok": all(p["ok"] for p in per),
                              "max_abs": max(p.get("max_abs", float("inf")) for p in per)}
        except Exception as e:
            checks[str(t)] = {"ok": False, "error": f"onnxruntime: {str(e).splitlines()[0][:300]}"}
    np.savez_compressed(OUT_DIR / f"{entry}.npz", **arrays)
    record["reference"] = str((OUT_DIR / f"{entry}.npz").relative_to(REPO_ROOT))
    record["ort_vs_torch"] = checks
    record["ort_matches_torch"] = all(c["ok"] for c in checks.values())


def export_block(name: str, exporter: str, results: dict):
    """Exports one block with `exporter`, trying grouped_mm then batched_mm."""
    fn = {"dynamo": export_dynamo, "torchscript": export_torchscript, "hf": export_hf}[exporter]
    attempts = []
    _, cls = arch_configs()[name]
    # An architecture with its own experts forward has one form to try.
    impls = ("grouped_mm", "batched_mm") if uses_experts_interface(cls) else ("own forward",)
    for impl in impls:
        entry = f"{name}_block_{exporter}" + ("_batched_mm" if impl == "batched_mm" else "")
        module = make_block(name, impl)
        inputs = block_inputs()
        sample = torch.randn(1, 16, HIDDEN, generator=torch.Generator().manual_seed(2))
        path = OUT_DIR / f"{entry}.onnx"
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(module, sample, path)
            model = clean_and_inline(path)
        except Exception as e:  # the exporter's failure is a result
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}" if str(e).strip() else type(e).__name__
            for line in str(e).splitlines():
                if "No ONNX function" in line or "Could not guard" in line or "data-dependent" in line:
                    reason += " | " + line.strip()[:300]
                    break
            attempts.append({"experts_implementation": impl, "error": reason})
            print(f"  {entry}: export fails: {reason[:200]}")
            if path.exists():
                path.unlink()
            continue
        record = describe(model, path)
        record.update(architecture=type(module.block).__name__, exporter=exporter,
                      experts_implementation=impl,
                      transformers=transformers.__version__,
                      torch=torch.__version__.split("+")[0], tokens=list(TOKENS))
        cases = {}
        for t, x in inputs.items():
            with torch.no_grad():
                cases[t] = ({"hidden_states": x.numpy()}, {"output": module(x).numpy()})
        save_reference(entry, path, record, cases)
        if attempts:
            record["failed_first"] = attempts
        results[entry] = record
        print(f"  {entry}: {record['size_bytes']} bytes, ort matches torch: {record['ort_matches_torch']}")
        return
    results[f"{name}_block_{exporter}"] = {"exporter": exporter, "export_failed": attempts,
                                           "transformers": transformers.__version__}


# --------------------------------------------------------------------------- #
# Whole models through OnnxExporter
# --------------------------------------------------------------------------- #


WHOLE = ("mixtral", "qwen3_moe", "olmoe")


def make_lm(name: str):
    cfg, _ = arch_configs()[name]
    cfg = cfg.__class__.from_dict(cfg.to_dict())
    cfg.initializer_range = 0.2
    torch.manual_seed(3)
    lm = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    return lm


def lm_outputs(lm, ids, **kwargs):
    """torch's outputs named like OnnxExporter's graph outputs."""
    with torch.no_grad():
        out = lm(input_ids=ids, use_cache=True, **kwargs)
    named = {"logits": out.logits.numpy()}
    for i, layer in enumerate(out.past_key_values.layers):
        named[f"cache.layers.{i}.keys"] = layer.keys.numpy()
        named[f"cache.layers.{i}.values"] = layer.values.numpy()
    return named


def export_whole(name: str, results: dict):
    from transformers.exporters import OnnxConfig, OnnxExporter

    entry = f"{name}_causal_lm_hf"
    lm = make_lm(name)
    path = OUT_DIR / f"{entry}.onnx"
    gen = torch.Generator().manual_seed(SEED)
    inputs = {t: torch.randint(0, lm.config.vocab_size, (1, t), generator=gen) for t in TOKENS}
    sample = torch.randint(0, lm.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(4))
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported = OnnxExporter().export(lm, {"input_ids": sample}, config=OnnxConfig(dynamic=True))
            exported.save_pretrained(str(OUT_DIR / f".{entry}"))
        src = OUT_DIR / f".{entry}" / "model.onnx"
        model = onnx.load(str(src), load_external_data=True)
        onnx.save(model, str(path))
        model = clean_and_inline(path)
    except Exception as e:
        results[entry] = {"exporter": "hf", "export_failed": [{"error": f"{type(e).__name__}: {str(e)[:300]}"}]}
        print(f"  {entry}: export fails: {e}")
        return
    finally:
        import shutil

        shutil.rmtree(OUT_DIR / f".{entry}", ignore_errors=True)
    record = describe(model, path)
    record.update(architecture=type(lm).__name__, exporter="hf", experts_implementation="grouped_mm",
                  transformers=transformers.__version__, torch=torch.__version__.split("+")[0], tokens=list(TOKENS))
    save_reference(entry, path, record, {t: ({"input_ids": ids.numpy()}, lm_outputs(lm, ids))
                                         for t, ids in inputs.items()})
    results[entry] = record
    print(f"  {entry}: {record['size_bytes']} bytes, ort matches torch: {record['ort_matches_torch']}")


def export_generation(name: str, results: dict):
    """OnnxExporter.export_for_generation: one file per component."""
    from transformers.exporters import OnnxConfig, OnnxExporter

    lm = make_lm(name)
    sample = torch.randint(0, lm.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(4))
    tmp = OUT_DIR / f".{name}_generation"
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported = OnnxExporter().export_for_generation(
                lm, {"input_ids": sample, "attention_mask": torch.ones_like(sample)},
                config=OnnxConfig(dynamic=True))
            exported.save_pretrained(str(tmp))
    except Exception as e:
        results[f"{name}_generation_hf"] = {"exporter": "hf", "export_failed": [{"error": f"{type(e).__name__}: {str(e)[:300]}"}]}
        print(f"  {name}_generation_hf: export fails: {e}")
        return
    import shutil

    for src in sorted(tmp.glob("*.onnx")):
        entry = f"{name}_generation_{src.stem}"
        path = OUT_DIR / f"{entry}.onnx"
        model = onnx.load(str(src), load_external_data=True)
        onnx.save(model, str(path))
        model = clean_and_inline(path)
        record = describe(model, path)
        record.update(architecture=type(lm).__name__, exporter="hf_generation", component=src.stem,
                      transformers=transformers.__version__, torch=torch.__version__.split("+")[0])
        if src.stem == "prefill":
            # The prompt's logits and KV cache; the decode step reads such a
            # cache (onnxruntime is its only reference).
            gen = torch.Generator().manual_seed(SEED)
            cases = {}
            for t in TOKENS:
                ids = torch.randint(0, lm.config.vocab_size, (1, t), generator=gen)
                pos = torch.arange(t)[None]
                cases[t] = ({"input_ids": ids.numpy(), "position_ids": pos.numpy()},
                            lm_outputs(lm, ids, position_ids=pos))
            record["tokens"] = list(TOKENS)
            save_reference(entry, path, record, cases)
        elif src.stem == "decode":
            # One step after T cached tokens: the cache comes from torch's
            # own prefill of a seeded prompt.
            gen = torch.Generator().manual_seed(SEED + 1)
            cases = {}
            for t in TOKENS:
                prompt = torch.randint(0, lm.config.vocab_size, (1, t), generator=gen)
                step = torch.randint(0, lm.config.vocab_size, (1, 1), generator=gen)
                with torch.no_grad():
                    cache = lm(input_ids=prompt, use_cache=True).past_key_values
                feeds = {"input_ids": step.numpy(), "position_ids": np.array([[t]], np.int64)}
                for i, layer in enumerate(cache.layers):
                    feeds[f"input.cache.layers.{i}.keys"] = layer.keys.numpy().copy()
                    feeds[f"input.cache.layers.{i}.values"] = layer.values.numpy().copy()
                want = lm_outputs(lm, step, position_ids=torch.tensor([[t]]), past_key_values=cache)
                cases[t] = (feeds, {("output." + k if k.startswith("cache") else k): v for k, v in want.items()})
            record["tokens"] = list(TOKENS)
            save_reference(entry, path, record, cases)
        results[entry] = record
        print(f"  {entry}: {record['size_bytes']} bytes; inputs {[i['name'] for i in record['inputs']]}")
    shutil.rmtree(tmp, ignore_errors=True)


# Greedy generation references: transformers' own generate loop.
GREEDY_PROMPTS = ((3, 14, 15), (1, 2, 3, 5, 8), (100,), tuple(range(40, 56)))
GREEDY_NEW_TOKENS = 24


def save_greedy_reference(name: str):
    """transformers' generate(do_sample=False) over the generation pair's
    model: mixtral_generation_greedy.json, the new ids of each prompt. The
    model is rebuilt from its seed; its prefill logits are checked against
    the committed prefill reference first, so the ids belong to the exported
    weights."""
    lm = make_lm(name)
    saved = np.load(OUT_DIR / f"{name}_generation_prefill.npz")
    for t in TOKENS:
        ids = torch.from_numpy(saved[f"input_ids_t{t}"])
        got = lm_outputs(lm, ids, position_ids=torch.arange(t)[None])["logits"]
        np.testing.assert_allclose(got, saved[f"logits_t{t}"], rtol=1e-5, atol=1e-6)
    cases = []
    for prompt in GREEDY_PROMPTS:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = lm.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=GREEDY_NEW_TOKENS, min_new_tokens=GREEDY_NEW_TOKENS,
                              pad_token_id=0, eos_token_id=None)
        cases.append({"prompt": list(prompt), "new_ids": out[0, len(prompt):].tolist()})
    path = OUT_DIR / f"{name}_generation_greedy.json"
    path.write_text(json.dumps({
        "generator": "examples/zoo/export_zoo_v5.py --only greedy",
        "transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
        "call": f"generate(do_sample=False, max_new_tokens={GREEDY_NEW_TOKENS})",
        "cases": cases}, indent=1) + "\n")
    print(f"  {path.name}: {len(cases)} prompts, {GREEDY_NEW_TOKENS} new tokens each")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*",
                        help="architectures (block forms), 'whole', 'generation' or 'greedy'")
    args = parser.parse_args()
    if transformers.__version__ != TRANSFORMERS_VERSION or not torch.__version__.startswith(TORCH_VERSION):
        sys.exit(f"export_zoo_v5: needs transformers {TRANSFORMERS_VERSION} and torch {TORCH_VERSION} "
                 f"(requirements-export-v5.txt), not {transformers.__version__} / {torch.__version__}")
    OUT_DIR.mkdir(exist_ok=True)
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    results = manifest.setdefault("models", {})
    wanted = set(args.only or list(arch_configs()) + ["whole", "generation"])
    for name in arch_configs():
        if name not in wanted:
            continue
        print(name)
        for exporter in ("dynamo", "torchscript", "hf"):
            try:
                export_block(name, exporter, results)
            except Exception:
                traceback.print_exc()
                results[f"{name}_block_{exporter}"] = {"exporter": exporter, "export_failed": [
                    {"error": traceback.format_exc().splitlines()[-1][:300]}]}
    if "whole" in wanted:
        for name in WHOLE:
            print(f"{name} (whole)")
            export_whole(name, results)
    if "generation" in wanted:
        print("mixtral (generation)")
        export_generation("mixtral", results)
    if "generation" in wanted or "greedy" in wanted:
        print("mixtral (greedy generation reference)")
        save_greedy_reference("mixtral")
    manifest.update(version=1, generator="examples/zoo/export_zoo_v5.py (see examples/zoo/README.md)",
                    tokens=list(TOKENS), seed=SEED, tolerance=PARITY_TOLERANCE)
    manifest["models"] = dict(sorted(results.items()))
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
