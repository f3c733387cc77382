#!/usr/bin/env python3
"""Exports moec's model zoo: tiny random-weight Hugging Face MoE layers as ONNX.

Every model is a real transformers module (an MoE block, or a whole tiny
Mixtral) built from a small config with fixed seeds on the CPU, exported with
the exporter its entry names, checked with onnx.checker, run in onnxruntime
at several token counts and compared with the torch module. The results and
the gate's ground truth (what moec's detector must recover) go to
manifest.json.

Different MoE forms need different transformers releases (README.md says
why), so each model belongs to a *track*, one pinned venv:

    .venv-export/bin/python examples/zoo/export_zoo.py          # this venv's track
    .venv-export/bin/python examples/zoo/export_zoo.py --all    # every track, each in its venv
    .venv-export/bin/python examples/zoo/export_zoo.py --only mixtral_block

The manifest is merged: a run rewrites the entries of the models it exported
and keeps the others.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper

ZOO_DIR = Path(__file__).resolve().parent
REPO_ROOT = ZOO_DIR.parent.parent
MANIFEST = ZOO_DIR / "manifest.json"
MANIFEST_VERSION = 1

# TorchScript exports use opset 17, the newest Debian's libonnx 1.12 knows.
TORCHSCRIPT_OPSET = 17
# The dynamo exporter's minimum.
DYNAMO_OPSET = 18
# onnxruntime 1.23 reads IR versions up to 11; opset 17 models carry 8.
HELPER_IR_VERSION = 8

# (batch, sequence) shapes every model runs at: 1, 7 and 32 tokens, and a
# second batch row to show that a dynamic batch axis really is dynamic.
PARITY_SHAPES = ((1, 1), (1, 7), (1, 32), (2, 5))
# Largest |onnxruntime - torch| accepted, relative to max(1, max |torch|);
# fp32 with reordered reductions lands near 1e-6.
PARITY_TOLERANCE = 1e-4
PARITY_SEED = 100

# Node metadata the dynamo exporter records that names paths on the
# exporting machine; dropped so that exports are reproducible.
MACHINE_SPECIFIC_METADATA = ("pkg.torch.onnx.stack_trace",)


@dataclasses.dataclass(frozen=True)
class Track:
    venv: str  # relative to the repository root
    requirements: str  # relative to this directory
    transformers: str  # exact pinned version
    torch: str = "2.9.1"  # exact pinned version


# The v5 venv is shared with export_zoo_v5.py's track (today's exporters),
# hence its newer torch.
TRACKS = {
    "main": Track(".venv-export", "requirements-export.txt", "4.51.3"),
    "v4.57": Track(".venv-export-v4.57", "requirements-export-v4.57.txt", "4.57.6"),
    "v5": Track(".venv-export-v5", "requirements-export-v5.txt", "5.24.0", "2.15.0"),
}


@dataclasses.dataclass
class Gate:
    """Ground truth of one MoE layer: router, experts, combine."""

    num_experts: int
    top_k: int
    score: str  # "softmax" | "sigmoid"
    topk_before_softmax: bool  # TopK on logits, then softmax over the k selected
    normalize: bool  # selected weights renormalised to sum to 1
    hidden: int
    ffn: int
    activation: str  # "silu_glu" | "relu" | "gpt_oss_clamped_swiglu"
    experts_present: list[int]  # experts whose computation exists in the graph
    routed_scaling_factor: float = 1.0
    n_group: int | None = None  # grouped top-k: groups, and groups kept
    topk_group: int | None = None
    selection_bias: bool = False  # bias added to scores for selection only
    capacity: int | None = None  # tokens per expert per sequence; overflow passes through
    shared_experts: dict | None = None  # {"count", "ffn", "gate": "none" | "sigmoid"}
    router_bias: bool = False
    expert_bias: bool = False


@dataclasses.dataclass
class Model:
    """One model to export: its torch side and what the manifest says of it."""

    module: torch.nn.Module  # computes what the ONNX graph should compute
    architecture: str  # exported transformers class (or contrib op)
    form: str  # loop | dense | stacked | parallel | contrib | whole
    exporter: str  # torchscript | dynamo | onnx.helper
    gates: list[Gate]  # one per MoE layer
    input_name: str
    input_axes: list[str | int]  # a name for each dynamic axis, else the size
    make_input: Callable[[torch.Generator, int, int], torch.Tensor]
    trace_input: torch.Tensor
    output_name: str = "output"
    file: str = ""  # relative to the repository root; default examples/zoo/<name>.onnx
    export_module: torch.nn.Module | None = None  # what the exporter sees, if not `module`
    onnx_model: onnx.ModelProto | None = None  # a graph built by hand
    # Parity reference when the graph knowingly differs from `module` (pruned
    # experts); `module` is then compared too and the difference recorded.
    reference: torch.nn.Module | None = None
    # Which inputs the exported graph computes the module's output for:
    # "any_input", "trace_routing" (only inputs routed like the trace input),
    # or "wrong" (not even the trace input: an exporter bug). Parity failures
    # are recorded, not fatal, unless it is "any_input".
    validity: str = "any_input"
    expect_ops: dict[str, int] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    extra: dict = dataclasses.field(default_factory=dict)


REGISTRY: dict[str, tuple[str, Callable[[], Model]]] = {}


def model(name: str, track: str):
    """Registers a model builder under `name` for `track`."""

    def register(fn: Callable[[], Model]):
        REGISTRY[name] = (track, fn)
        return fn

    return register


# --------------------------------------------------------------------------- #
# Building blocks
# --------------------------------------------------------------------------- #


def init_params(module: torch.nn.Module, seed: int, std: float = 0.25, bias_std: float = 0.1):
    """Draws every matrix from N(0, std) and every vector from N(0, bias_std).

    transformers' init (std 0.02) makes a tiny layer's output ~1e-4, where a
    parity check says nothing, and some expert tensors start as torch.empty.
    Norm weights keep their defaults.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if "norm" in name:
                continue
            p.copy_(torch.randn(p.shape, generator=gen) * (std if p.dim() >= 2 else bias_std))
    return module.eval()


def seeded_block(cls, cfg, seed: int) -> torch.nn.Module:
    """cls(cfg) with init_params' weights; the seed also fixes any buffers' init."""
    torch.manual_seed(seed)
    return init_params(cls(cfg), seed=seed)


class FirstOutput(torch.nn.Module):
    """A block whose forward returns (output, router_logits, ...) reduced to the output."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.block = block

    def forward(self, hidden_states):
        out = self.block(hidden_states)
        return out[0] if isinstance(out, tuple) else out


class TokenMajor(torch.nn.Module):
    """A [batch, seq, hidden] module applied to [tokens, hidden]."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, hidden_states):
        return self.inner(hidden_states[None])[0]


class Logits(torch.nn.Module):
    """A causal LM reduced to input_ids -> logits, without a KV cache."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        return self.lm(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def hidden_input(hidden: int):
    def make(gen: torch.Generator, batch: int, seq: int):
        return torch.randn(batch, seq, hidden, generator=gen)

    return make


def expert_token_counts(block: torch.nn.Module, experts, x: torch.Tensor) -> list[int]:
    """How many tokens of x each expert module computes on."""
    modules = list(experts.values()) if isinstance(experts, torch.nn.ModuleDict) else list(experts)
    counts = [0] * len(modules)

    def hook(index):
        def count(_module, args, _output):
            counts[index] += args[0].reshape(-1, args[0].shape[-1]).shape[0]

        return count

    handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(modules)]
    try:
        with torch.no_grad():
            block(x)
    finally:
        for h in handles:
            h.remove()
    return counts


def experts_hit(block: torch.nn.Module, experts, x: torch.Tensor) -> list[int]:
    """Indices of the expert modules that compute on at least one token of x."""
    return [i for i, n in enumerate(expert_token_counts(block, experts, x)) if n]


def input_reaching_all(block, experts, hidden: int, tokens: int, seed: int) -> torch.Tensor:
    """A [1, tokens, hidden] input that sends at least two tokens to every expert.

    Blocks that skip experts without tokens in Python (`if numel() > 0`, a loop
    over `nonzero().tolist()`) leave those experts out of a trace, and the
    TorchScript tracer specialises an expert that gets exactly one token (a
    Reshape to [hidden] in Switch's index_put), hence two.
    """
    gen = torch.Generator().manual_seed(seed)
    for _ in range(1000):
        x = torch.randn(1, tokens, hidden, generator=gen)
        if min(expert_token_counts(block, experts, x)) >= 2:
            return x
    raise RuntimeError(f"no input of {tokens} tokens gives every expert two tokens")


def gate_truth(num_experts, top_k, hidden, ffn, **kw) -> Gate:
    """Ground truth of a softmax -> top-k -> renormalise gate with every expert present.

    kw overrides any field.
    """
    fields = dict(
        num_experts=num_experts,
        top_k=top_k,
        score="softmax",
        topk_before_softmax=False,
        normalize=True,
        hidden=hidden,
        ffn=ffn,
        activation="silu_glu",
        experts_present=list(range(num_experts)),
    )
    fields.update(kw)
    return Gate(**fields)


def block_model(block: torch.nn.Module, hidden: int, trace_seed: int = 0, trace_input=None, **fields) -> Model:
    """A Model of an MoE block that maps hidden_states [batch, seq, hidden] to output.

    The trace input is trace_input, or 16 tokens drawn with trace_seed.
    """
    make = hidden_input(hidden)
    if trace_input is None:
        trace_input = make(torch.Generator().manual_seed(trace_seed), 1, 16)
    return Model(
        module=FirstOutput(block),
        input_name="hidden_states",
        input_axes=["batch", "seq", hidden],
        make_input=make,
        trace_input=trace_input,
        **fields,
    )


# --------------------------------------------------------------------------- #
# Track "main": transformers 4.51.3, loops over range(num_experts)
# --------------------------------------------------------------------------- #

MIXTRAL_BLOCK = dict(hidden=16, ffn=32, experts=8, top_k=2)


def mixtral_block_module(seed: int = 1, **config):
    """A MixtralSparseMoeBlock of MIXTRAL_BLOCK's size; config overrides MixtralConfig.

    mixtral_block and its dynamo, contrib and 4.57 variants share seed 1 and so
    their weights (parameter names and shapes are the same in 4.51 and 4.57).
    """
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    c = MIXTRAL_BLOCK
    cfg = MixtralConfig(
        hidden_size=c["hidden"],
        intermediate_size=c["ffn"],
        num_local_experts=c["experts"],
        num_experts_per_tok=c["top_k"],
        hidden_act="silu",
        **config,
    )
    return seeded_block(MixtralSparseMoeBlock, cfg, seed=seed)


def mixtral_gate() -> Gate:
    c = MIXTRAL_BLOCK
    return gate_truth(c["experts"], c["top_k"], c["hidden"], c["ffn"])


@model("mixtral_block", track="main")
def mixtral_block() -> Model:
    c = MIXTRAL_BLOCK
    return block_model(
        mixtral_block_module(),
        c["hidden"],
        trace_seed=2,
        architecture="MixtralSparseMoeBlock",
        form="loop",
        exporter="torchscript",
        gates=[mixtral_gate()],
        expect_ops={"NonZero": c["experts"], "ScatterElements": c["experts"]},
        notes=[
            "Router: MatMul -> Softmax -> TopK -> ReduceSum/Div (renormalise) -> OneHot -> "
            "Transpose. Per expert (8 blocks): NonZero -> Gather(tokens) -> SwiGLU MLP "
            "(MatMul, Sigmoid*Mul, MatMul) -> Mul(weight) -> ScatterElements(add)."
        ],
    )


@model("mixtral_block_dynamo", track="main")
def mixtral_block_dynamo() -> Model:
    m = mixtral_block()
    m.exporter = "dynamo"
    m.expect_ops = {"NonZero": MIXTRAL_BLOCK["experts"], "ScatterND": MIXTRAL_BLOCK["experts"]}
    m.notes = [
        "mixtral_block's module and weights through torch.onnx.export(dynamo=True) (onnxscript "
        "0.7.2; 0.5.6 fails on index_put with an unbacked token count). Per expert: NonZero -> "
        "GatherND -> Gemm SwiGLU MLP -> Mul -> ScatterND(add) instead of ScatterElements."
    ]
    return m


@model("mixtral_contrib_moe", track="main")
def mixtral_contrib_moe() -> Model:
    """onnxruntime's com.microsoft.MoE on mixtral_block's weights.

    onnxruntime 1.23.2's CPU kernel implements SwiGLU only with interleaved
    fusion (swiglu_fusion=1: fc1 rows alternate gate, up) and rejects fc3, so
    w1 and w3 are interleaved into one fc1 [E, 2F, H]. The op's SwiGLU is
    G * sigmoid(alpha * G) * (L + beta): alpha=1, beta=0 and no limit give
    Mixtral's silu(w1 x) * (w3 x). router_probs takes the router's logits; the
    op applies softmax, top-k and (normalize_routing_weights=1) the
    renormalisation itself.
    """
    c = MIXTRAL_BLOCK
    block = mixtral_block_module()
    E, F, H = c["experts"], c["ffn"], c["hidden"]

    def stacked(name):
        return np.stack([getattr(e, name).weight.detach().numpy() for e in block.experts])

    w1, w3, w2 = stacked("w1"), stacked("w3"), stacked("w2")  # [E,F,H], [E,F,H], [E,H,F]
    fc1 = np.empty((E, 2 * F, H), dtype=np.float32)
    fc1[:, 0::2] = w1
    fc1[:, 1::2] = w3
    nodes = [
        helper.make_node("MatMul", ["hidden_states", "router.weight"], ["router_logits"], name="router"),
        helper.make_node(
            "MoE",
            ["hidden_states", "router_logits", "experts.fc1", "", "experts.fc2"],
            ["output"],
            name="moe",
            domain="com.microsoft",
            k=c["top_k"],
            normalize_routing_weights=1,
            activation_type="swiglu",
            swiglu_fusion=1,
            activation_alpha=1.0,
            activation_beta=0.0,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "mixtral_contrib_moe",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["tokens", H])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["tokens", H])],
        [
            numpy_helper.from_array(block.gate.weight.detach().numpy().T.copy(), "router.weight"),
            numpy_helper.from_array(fc1, "experts.fc1"),
            numpy_helper.from_array(w2, "experts.fc2"),
        ],
    )
    onnx_model = helper.make_model(
        graph,
        ir_version=HELPER_IR_VERSION,
        opset_imports=[helper.make_opsetid("", TORCHSCRIPT_OPSET), helper.make_opsetid("com.microsoft", 1)],
        producer_name="moec examples/zoo/export_zoo.py",
    )

    def make(gen, batch, seq):
        return torch.randn(batch * seq, H, generator=gen)

    return Model(
        module=TokenMajor(FirstOutput(block)).eval(),
        architecture="com.microsoft.MoE",
        form="contrib",
        exporter="onnx.helper",
        gates=[mixtral_gate()],
        input_name="hidden_states",
        input_axes=["tokens", H],
        make_input=make,
        trace_input=make(torch.Generator().manual_seed(2), 1, 16),
        onnx_model=onnx_model,
        notes=["mixtral_block's weights in onnxruntime's fused MoE contrib op (router MatMul + MoE)."],
        extra={
            "contrib": {
                "fc1": "[E, 2*ffn, hidden]: rows alternate w1 (gate) and w3 (up)",
                "fc2": "[E, hidden, ffn]: w2",
                "attributes": "k=2 normalize_routing_weights=1 activation_type=swiglu "
                "swiglu_fusion=1 activation_alpha=1 activation_beta=0",
                "router_probs": "router logits [tokens, E]; softmax is inside the op",
            }
        },
    )


MIXTRAL_TINY = dict(vocab=64, hidden=32, ffn=32, experts=8, top_k=2, layers=2, heads=4, kv_heads=2)


@model("mixtral_tiny", track="main")
def mixtral_tiny() -> Model:
    """The bundled example: a whole two-layer MixtralForCausalLM."""
    from transformers import MixtralConfig, MixtralForCausalLM

    c = MIXTRAL_TINY
    cfg = MixtralConfig(
        vocab_size=c["vocab"],
        hidden_size=c["hidden"],
        intermediate_size=c["ffn"],
        num_hidden_layers=c["layers"],
        num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"],
        num_local_experts=c["experts"],
        num_experts_per_tok=c["top_k"],
        max_position_embeddings=128,
        hidden_act="silu",
        use_cache=False,
        tie_word_embeddings=False,
        attn_implementation="eager",
        # Large enough that a 32-wide model's activations are O(1) and the
        # parity check compares meaningful numbers.
        initializer_range=0.2,
    )
    torch.manual_seed(3)
    lm = MixtralForCausalLM(cfg).eval()

    def make(gen, batch, seq):
        return torch.randint(0, c["vocab"], (batch, seq), generator=gen)

    gate = gate_truth(c["experts"], c["top_k"], c["hidden"], c["ffn"])
    return Model(
        module=Logits(lm).eval(),
        architecture="MixtralForCausalLM",
        form="whole",
        exporter="torchscript",
        gates=[gate] * c["layers"],
        input_name="input_ids",
        input_axes=["batch", "seq"],
        output_name="logits",
        make_input=make,
        trace_input=make(torch.Generator().manual_seed(4), 1, 16),
        file="examples/mixtral-tiny.onnx",
        expect_ops={"NonZero": c["layers"] * c["experts"], "TopK": c["layers"]},
        notes=[
            "Embedding -> 2 x (RMSNorm -> causal GQA attention (4 heads, 2 KV heads, RoPE) -> "
            "residual -> RMSNorm -> Mixtral MoE (loop form) -> residual) -> RMSNorm -> LM head. "
            "Eager attention, no KV cache; output logits [batch, seq, vocab]."
        ],
        extra={"model": {k: c[k] for k in ("vocab", "layers", "heads", "kv_heads")}},
    )


QWEN2_MOE_BLOCK = dict(hidden=16, ffn=32, experts=8, top_k=2, shared_ffn=64)


@model("qwen2_moe_block", track="main")
def qwen2_moe_block() -> Model:
    from transformers import Qwen2MoeConfig
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    c = QWEN2_MOE_BLOCK
    cfg = Qwen2MoeConfig(
        hidden_size=c["hidden"],
        moe_intermediate_size=c["ffn"],
        shared_expert_intermediate_size=c["shared_ffn"],
        num_experts=c["experts"],
        num_experts_per_tok=c["top_k"],
        norm_topk_prob=False,
        hidden_act="silu",
    )
    block = seeded_block(Qwen2MoeSparseMoeBlock, cfg, seed=7)
    return block_model(
        block,
        c["hidden"],
        trace_seed=8,
        architecture="Qwen2MoeSparseMoeBlock",
        form="loop",
        exporter="torchscript",
        gates=[
            gate_truth(
                c["experts"], c["top_k"], c["hidden"], c["ffn"], normalize=False,
                shared_experts={"count": 1, "ffn": c["shared_ffn"], "gate": "sigmoid"},
            )
        ],
        expect_ops={"NonZero": c["experts"], "ScatterElements": c["experts"]},
        notes=[
            "Softmax -> TopK without renormalisation; 8 loop-form experts; a shared SwiGLU expert "
            "(ffn 64) scaled by Sigmoid(MatMul(x, shared_expert_gate [H, 1])) and added."
        ],
    )


DEEPSEEK_V3_BLOCK = dict(hidden=16, ffn=32, experts=8, top_k=2, n_group=4, topk_group=2,
                         scaling=2.5, shared=1)


def deepseek_v3_module():
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    c = DEEPSEEK_V3_BLOCK
    cfg = DeepseekV3Config(
        hidden_size=c["hidden"],
        moe_intermediate_size=c["ffn"],
        n_routed_experts=c["experts"],
        num_experts_per_tok=c["top_k"],
        n_group=c["n_group"],
        topk_group=c["topk_group"],
        routed_scaling_factor=c["scaling"],
        n_shared_experts=c["shared"],
        norm_topk_prob=True,
        hidden_act="silu",
    )
    block = seeded_block(DeepseekV3MoE, cfg, seed=9)
    # e_score_correction_bias is a buffer (zeros at init); give it values that
    # change the selection. Kept above -0.05 so that (sigmoid score + bias) of
    # experts in the kept groups stays positive: the router zeroes the others
    # with masked_fill(0.0), and a negative kept score would make the top-k
    # choose among exact ties, which torch and onnxruntime break differently.
    gen = torch.Generator().manual_seed(10)
    with torch.no_grad():
        block.gate.e_score_correction_bias.copy_(torch.rand(c["experts"], generator=gen) * 0.3 - 0.05)
    return block


def deepseek_v3_gate(experts_present) -> Gate:
    c = DEEPSEEK_V3_BLOCK
    return gate_truth(
        c["experts"], c["top_k"], c["hidden"], c["ffn"],
        score="sigmoid",
        routed_scaling_factor=c["scaling"],
        n_group=c["n_group"],
        topk_group=c["topk_group"],
        selection_bias=True,
        shared_experts={"count": c["shared"], "ffn": c["ffn"] * c["shared"], "gate": "none"},
        experts_present=experts_present,
    )


@model("deepseek_v3_block", track="main")
def deepseek_v3_block() -> Model:
    c = DEEPSEEK_V3_BLOCK
    block = deepseek_v3_module()
    return block_model(
        block,
        c["hidden"],
        architecture="DeepseekV3MoE",
        form="loop",
        exporter="torchscript",
        gates=[deepseek_v3_gate(list(range(c["experts"])))],
        # DeepseekV3MoE.moe skips experts without tokens (`if numel() > 0`).
        trace_input=input_reaching_all(block, block.experts, c["hidden"], 32, seed=11),
        expect_ops={"NonZero": c["experts"]},
        notes=[
            "Sigmoid scores; selection uses scores + e_score_correction_bias: per group of 2 the "
            "top-2 sum (TopK, ReduceSum) -> TopK(topk_group=2) groups -> ScatterElements mask -> "
            "masked_fill(0) -> TopK(k=2, unsorted); weights are the unbiased scores gathered "
            "(GatherElements), renormalised (+1e-20) and scaled by 2.5; 8 loop-form experts "
            "(Where/NonZero -> Gather -> SwiGLU -> Mul -> index_add); plain shared expert added."
        ],
    )


@model("deepseek_v3_block_pruned", track="main")
def deepseek_v3_block_pruned() -> Model:
    """deepseek_v3_block traced on 2 tokens: the experts they miss are not in the graph.

    The exported graph runs for any input but silently drops the contribution
    of every token routed to a missing expert. Its parity reference is the
    module with those experts' outputs zeroed; the full module's divergence is
    recorded as well.
    """
    c = DEEPSEEK_V3_BLOCK
    m = deepseek_v3_block()
    m.trace_input = hidden_input(c["hidden"])(torch.Generator().manual_seed(12), 1, 2)
    present = experts_hit(m.module.block, m.module.block.experts, m.trace_input)
    pruned = copy.deepcopy(m.module.block)
    with torch.no_grad():
        for i, expert in enumerate(pruned.experts):
            if i not in present:
                expert.down_proj.weight.zero_()
    m.reference = FirstOutput(pruned).eval()
    m.gates = [deepseek_v3_gate(present)]
    m.expect_ops = {"NonZero": len(present)}
    m.notes = [
        f"deepseek_v3_block's module traced on 2 tokens: only experts {present} got tokens, "
        "so `if token_indices.numel() > 0` kept only their blocks. The graph runs at every "
        "token count but drops the output of tokens routed to the other experts "
        "(parity_vs_full_module); it matches the module with those experts zeroed (parity)."
    ]
    return m


SWITCH_BLOCK = dict(hidden=16, ffn=32, experts=8, capacity=4)


@model("switch_transformers_block", track="main")
def switch_transformers_block() -> Model:
    from transformers import SwitchTransformersConfig
    from transformers.models.switch_transformers.modeling_switch_transformers import (
        SwitchTransformersSparseMLP,
    )

    c = SWITCH_BLOCK
    cfg = SwitchTransformersConfig(
        d_model=c["hidden"],
        d_ff=c["ffn"],
        num_experts=c["experts"],
        expert_capacity=c["capacity"],
        router_bias=False,
        router_dtype="float32",
        dense_act_fn="relu",
    )
    block = seeded_block(SwitchTransformersSparseMLP, cfg, seed=13)
    return block_model(
        block,
        c["hidden"],
        architecture="SwitchTransformersSparseMLP",
        form="loop",
        exporter="torchscript",
        gates=[
            gate_truth(
                c["experts"], 1, c["hidden"], c["ffn"], normalize=False,
                activation="relu", capacity=c["capacity"],
            )
        ],
        # The block loops over `nonzero(...).tolist()`: experts without a
        # token (within capacity) at trace time would be left out.
        trace_input=input_reaching_all(block, block.experts, c["hidden"], 24, seed=14),
        expect_ops={"ScatterND": c["experts"], "ArgMax": 1, "CumSum": 1},
        notes=[
            "Softmax -> ArgMax -> OneHot -> CumSum over the sequence -> LessOrEqual(capacity 4) -> "
            "Mul (drop overflow); ReduceMax probability. Per expert: boolean-mask gather (NonZero, "
            "GatherND) -> ReLU MLP -> index_put (ScatterND) into a copy of the input; output = "
            "max probability * states, so dropped tokens pass through scaled by it."
        ],
    )


GRANITE_BLOCK = dict(hidden=16, ffn=32, experts=8, top_k=2)


def granitemoe_model(exporter: str) -> Model:
    from transformers import GraniteMoeConfig
    from transformers.models.granitemoe.modeling_granitemoe import GraniteMoeMoE

    c = GRANITE_BLOCK
    cfg = GraniteMoeConfig(
        hidden_size=c["hidden"],
        intermediate_size=c["ffn"],
        num_local_experts=c["experts"],
        num_experts_per_tok=c["top_k"],
        hidden_act="silu",
    )
    block = seeded_block(GraniteMoeMoE, cfg, seed=15)
    return block_model(
        block,
        c["hidden"],
        trace_seed=16,
        architecture="GraniteMoeMoE",
        form="parallel",
        exporter=exporter,
        gates=[gate_truth(c["experts"], c["top_k"], c["hidden"], c["ffn"], topk_before_softmax=True)],
    )


@model("granitemoe_block", track="main")
def granitemoe_block() -> Model:
    m = granitemoe_model("torchscript")
    m.validity = "wrong"
    m.notes = [
        "TopK on logits -> Softmax over k; Sort of the flattened expert ids -> Gather tokens -> "
        "Split by per-expert token counts -> per expert MatMul with weight[i] -> Concat -> "
        "chunk/SiLU*up -> the same for output_linear -> Mul(gates) -> index_add (ScatterElements).",
        "Wrong for every input (validity 'wrong'), twice over. GraniteMoeTopKGating calls "
        "expert_size.tolist(), so the trace freezes the trace input's per-expert token counts as "
        "constant Split sizes and onnxruntime fails on any other counts. And the TorchScript "
        "exporter lowers the non-in-place index_add to a ScatterElements without reduction into "
        "zeros: each token appears top_k times in the index, the last write wins, so even the "
        "trace input's output is wrong (parity_at_trace_input). Use granitemoe_block_dynamo.",
    ]
    return m


@model("granitemoe_block_dynamo", track="main")
def granitemoe_block_dynamo() -> Model:
    m = granitemoe_model("dynamo")
    m.notes = [
        "granitemoe_block's module through the dynamo exporter: torch.export keeps the per-expert "
        "token counts as unbacked symbols, so the Split sizes are computed in the graph "
        "(ReduceSum of the scattered one-hot) and the graph is valid for every input."
    ]
    return m


# --------------------------------------------------------------------------- #
# Track "v4.57": transformers 4.57.6 (GPT-OSS; loops over the experts hit)
# --------------------------------------------------------------------------- #

GPT_OSS_BLOCK = dict(hidden=16, ffn=16, experts=8, top_k=2)


@model("gpt_oss_block", track="v4.57")
def gpt_oss_block() -> Model:
    """GptOssMLP's dense inference path, traced on the meta device.

    GptOssExperts.forward loops over the experts hit when its input is on the
    CPU (or when training) and otherwise runs every expert on every token with
    bmm. That dense path is the form this model stands for; it has no
    data-dependent control flow, so it is traced on `meta` tensors (which are
    not "cpu"), and the traced module then gets the real weights. Parity
    compares it with the CPU loop path of the same module.
    """
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    c = GPT_OSS_BLOCK
    cfg = GptOssConfig(
        hidden_size=c["hidden"],
        intermediate_size=c["ffn"],
        num_local_experts=c["experts"],
        num_experts_per_tok=c["top_k"],
    )
    block = seeded_block(GptOssMLP, cfg, seed=5)
    m = block_model(
        block,
        c["hidden"],
        trace_seed=6,
        architecture="GptOssMLP",
        form="dense",
        exporter="torchscript",
        gates=[
            gate_truth(
                c["experts"], c["top_k"], c["hidden"], c["ffn"], topk_before_softmax=True,
                activation="gpt_oss_clamped_swiglu", router_bias=True, expert_bias=True,
            )
        ],
        expect_ops={"TopK": 1, "Tile": 1, "ReduceSum": 1, "NonZero": 0},
        notes=[
            "Gemm router with bias -> TopK on logits -> Softmax over k -> ScatterElements into "
            "[T, E] zeros. Tile tokens E times -> MatMul (bmm) with gate_up_proj [E, H, 2F] + bias "
            "-> gate = even columns, up = odd columns (Slice step 2) -> Clip(max=7) / Clip(-7, 7) "
            "-> gate*Sigmoid(1.702*gate)*(up+1) -> MatMul with down_proj [E, F, H] + bias -> Mul by "
            "the transposed [E, T] weights -> ReduceSum over experts.",
            "Traced on the meta device to take GptOssExperts' non-CPU (dense bmm) branch.",
        ],
        extra={
            "swiglu": {"alpha": 1.702, "limit": 7.0, "up_offset": 1.0,
                       "gate_up_layout": "interleaved: gate at even, up at odd columns"}
        },
    )
    meta = copy.deepcopy(m.module).eval().to("meta")
    traced = torch.jit.trace(meta, (m.trace_input.to("meta"),), check_trace=False)
    m.export_module = traced.to_empty(device="cpu")
    m.export_module.load_state_dict(m.module.state_dict())
    return m


@model("mixtral_block_hit_loop", track="v4.57")
def mixtral_block_hit_loop() -> Model:
    """Mixtral's block as transformers 4.53-4.57 write it: a loop over the experts hit.

    `for expert_idx in expert_hit` iterates a NonZero result; the trace
    unrolls one block per expert hit at trace time and indexes them with
    Split(NonZero) outputs, so the graph runs only when exactly as many
    experts are hit as at trace time.
    """
    c = MIXTRAL_BLOCK
    return block_model(
        mixtral_block_module(),
        c["hidden"],
        trace_seed=2,
        architecture="MixtralSparseMoeBlock",
        form="loop",
        exporter="torchscript",
        gates=[mixtral_gate()],
        validity="trace_routing",
        expect_ops={"NonZero": c["experts"] + 1},
        notes=[
            "mixtral_block's weights under transformers 4.57.6, whose loop runs over "
            "greater(expert_mask.sum(), 0).nonzero(): one NonZero lists the experts hit, a Split "
            "cuts it into as many pieces as experts were hit at trace time (all 8 here), and each "
            "piece indexes the expert mask while the block's weights stay the traced expert's. "
            "onnxruntime fails (Split) whenever fewer experts are hit, e.g. at 1 or 7 tokens "
            "(validity 'trace_routing'; the parity entries record it)."
        ],
    )


# --------------------------------------------------------------------------- #
# Track "v5": transformers 5.24.0 (stacked expert weights)
# --------------------------------------------------------------------------- #


@model("mixtral_block_batched_mm", track="v5")
def mixtral_block_batched_mm() -> Model:
    c = MIXTRAL_BLOCK
    return block_model(
        # v5 stacks the experts' weights ([E, 2F, H] and [E, H, F]), so seed 1
        # would not reproduce mixtral_block's values anyway.
        mixtral_block_module(seed=17, experts_implementation="batched_mm"),
        c["hidden"],
        trace_seed=18,
        architecture="MixtralSparseMoeBlock",
        form="stacked",
        exporter="torchscript",
        gates=[mixtral_gate()],
        expect_ops={"NonZero": 0},
        notes=[
            "transformers v5 MixtralExperts (gate_up_proj [E, 2F, H], down_proj [E, H, F]) with "
            "experts_implementation='batched_mm': each token repeated k times (repeat_interleave: "
            "OneHot/Tile/Flatten) -> Gather(gate_up_proj, flattened top-k ids) -> MatMul (bmm with "
            "[S, H, 1]) -> chunk into gate (first F rows) and up (two Slices) -> SiLU(gate)*up -> "
            "Gather(down_proj) -> MatMul -> Mul(weights) -> Reshape [T, k, H] -> ReduceSum over k."
        ],
    )


# --------------------------------------------------------------------------- #
# Export, check, parity, manifest
# --------------------------------------------------------------------------- #


def dynamic_axes_of(m: Model) -> dict[int, str]:
    return {i: a for i, a in enumerate(m.input_axes) if isinstance(a, str)}


def export_onnx(name: str, m: Model, path: Path):
    """Writes m's ONNX graph to path, weights inline, dynamic axes named."""
    if m.onnx_model is not None:
        onnx.save(m.onnx_model, str(path))
        return
    module = m.export_module if m.export_module is not None else m.module
    # torch.onnx.export restores the top module's training flag onto every
    # submodule afterwards; a wrapper left in training mode would switch on
    # the experts' dropout for the parity check.
    module.eval()
    axes = dynamic_axes_of(m)
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about every Python-side use of a tensor value;
        # README.md discusses the ones that matter.
        warnings.simplefilter("ignore")
        if m.exporter == "torchscript":
            torch.onnx.export(
                module,
                (m.trace_input,),
                str(path),
                input_names=[m.input_name],
                output_names=[m.output_name],
                dynamic_axes={m.input_name: axes, m.output_name: axes},
                opset_version=TORCHSCRIPT_OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        elif m.exporter == "dynamo":
            program = torch.onnx.export(
                module,
                (m.trace_input,),
                input_names=[m.input_name],
                output_names=[m.output_name],
                dynamic_shapes=({i: torch.export.Dim.DYNAMIC for i in axes},),
                opset_version=DYNAMO_OPSET,
                dynamo=True,
                external_data=False,
                optimize=True,
                verbose=False,
            )
            program.save(str(path), external_data=False)
        else:
            raise ValueError(f"{name}: unknown exporter {m.exporter!r}")
    proto = onnx.load(str(path))
    # Name the dynamic axes as the manifest does, whatever the exporter chose.
    for value in list(proto.graph.input) + list(proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        for i, axis in axes.items():
            if i < len(dims) and not dims[i].HasField("dim_value"):
                dims[i].dim_param = axis
    for node in proto.graph.node:
        keep = [p for p in node.metadata_props if p.key not in MACHINE_SPECIFIC_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx.save(proto, str(path))


def add_metadata(path: Path, name: str, track: str):
    proto = onnx.load(str(path))
    meta = {
        "moec.zoo.name": name,
        "moec.zoo.generator": "examples/zoo/export_zoo.py",
        "moec.zoo.track": track,
        "moec.zoo.transformers": transformers.__version__,
        "moec.zoo.torch": torch.__version__.split("+")[0],
    }
    del proto.metadata_props[:]
    for k, v in meta.items():
        proto.metadata_props.add(key=k, value=v)
    onnx.save(proto, str(path))


def difference(got: np.ndarray, want: np.ndarray) -> dict:
    """max_abs, max_rel and ok of onnxruntime's output against torch's."""
    if got.shape != want.shape:
        return {"ok": False, "error": f"output shape {list(got.shape)} != torch {list(want.shape)}"}
    diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
    scale = float(np.abs(want).max())
    return {
        "max_abs": diff,
        "max_rel": diff / max(scale, 1e-30),
        "ok": diff <= PARITY_TOLERANCE * max(1.0, scale),
    }


def compare(session, m: Model, references: list[torch.nn.Module]) -> list[list[dict]]:
    """Runs session and each reference on PARITY_SHAPES; one result list per reference."""
    gen = torch.Generator().manual_seed(PARITY_SEED)
    results: list[list[dict]] = [[] for _ in references]
    for ref in references:
        ref.eval()
    for batch, seq in PARITY_SHAPES:
        if batch != 1 and "batch" not in m.input_axes:
            continue
        x = m.make_input(gen, batch, seq)
        base = {"batch": batch, "seq": seq, "tokens": batch * seq, "input_shape": list(x.shape)}
        try:
            got = session.run(None, {m.input_name: x.numpy()})[0]
        except Exception as e:  # onnxruntime's exception types are not public
            for r in results:
                r.append({**base, "ok": False, "error": str(e).splitlines()[0][:300]})
            continue
        for ref, r in zip(references, results):
            with torch.no_grad():
                want = ref(x).numpy()
            r.append({**base, **difference(got, want)})
    return results


def graph_summary(proto: onnx.ModelProto) -> dict:
    ops = Counter(
        (f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type for n in proto.graph.node
    )

    def io(values):
        return [
            {
                "name": v.name,
                "dtype": helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name,
                "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim],
            }
            for v in values
        ]

    opsets = {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
    return {
        "opset": opsets.get("ai.onnx"),
        "opsets": opsets,
        "ir_version": proto.ir_version,
        "inputs": io(proto.graph.input),
        "outputs": io(proto.graph.output),
        "initializers": len(proto.graph.initializer),
        "weight_bytes": sum(numpy_helper.to_array(t).nbytes for t in proto.graph.initializer),
        "nodes": sum(ops.values()),
        "op_counts": dict(sorted(ops.items())),
    }


def export_one(name: str, track: str) -> dict:
    m = REGISTRY[name][1]()
    rel = m.file or f"examples/zoo/{name}.onnx"
    path = REPO_ROOT / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    export_onnx(name, m, path)
    add_metadata(path, name, track)

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    if any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise RuntimeError(f"{name}: weights went to external data")
    summary = graph_summary(proto)
    wrong_ops = {
        op: (summary["op_counts"].get(op, 0), want)
        for op, want in m.expect_ops.items()
        if summary["op_counts"].get(op, 0) != want
    }
    if wrong_ops:
        raise RuntimeError(f"{name}: op counts (got, expected) {wrong_ops}")

    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # failures are recorded in the manifest
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    references = [m.reference or m.module] + ([m.module] if m.reference is not None else [])
    checks = compare(session, m, references)
    at_trace = None
    if m.validity != "any_input":
        # The graph is right for the input it was traced on: show that.
        with torch.no_grad():
            want = m.module(m.trace_input).numpy()
        got = session.run(None, {m.input_name: m.trace_input.numpy()})[0]
        at_trace = {"input_shape": list(m.trace_input.shape), **difference(got, want)}

    data = path.read_bytes()
    entry = {
        "file": rel,
        "size_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "architecture": m.architecture,
        "form": m.form,
        "exporter": m.exporter,
        "track": track,
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        **summary,
        "dynamic_axes": {m.input_name: {str(i): a for i, a in dynamic_axes_of(m).items()}},
        "gate": dataclasses.asdict(m.gates[0]) if len(m.gates) == 1 else None,
        "layers": [dataclasses.asdict(g) for g in m.gates] if len(m.gates) > 1 else None,
        "validity": m.validity,
        "parity": checks[0],
        "parity_vs_full_module": checks[1] if len(checks) > 1 else None,
        "parity_at_trace_input": at_trace,
        "notes": m.notes,
        **m.extra,
    }
    entry = {k: v for k, v in entry.items() if v is not None}
    failed = [c for c in checks[0] if not c["ok"]]
    if failed and m.validity == "any_input":
        raise RuntimeError(f"{name}: onnxruntime disagrees with torch: {failed}")
    if m.validity == "trace_routing" and not at_trace["ok"]:
        raise RuntimeError(f"{name}: wrong even for its trace input: {at_trace}")
    return entry


def current_track() -> str:
    for name, t in TRACKS.items():
        if transformers.__version__ == t.transformers:
            return name
    pins = ", ".join(f"{n}: {t.transformers}" for n, t in TRACKS.items())
    sys.exit(
        f"export_zoo.py: transformers {transformers.__version__} matches no track ({pins}); "
        "create the venvs as examples/zoo/README.md says"
    )


def _compact_json(value, indent: int = 0) -> str:
    """JSON with scalar-only lists and small flat objects kept on one line."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    flat = json.dumps(value)
    is_leaf_list = isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value)
    is_small_dict = isinstance(value, dict) and len(flat) <= 100 and all(
        not isinstance(v, (list, dict)) or (isinstance(v, list) and len(v) <= 4) for v in value.values()
    )
    if not isinstance(value, (list, dict)) or is_leaf_list or is_small_dict:
        return flat
    if isinstance(value, list):
        items = [inner + _compact_json(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    items = [f"{inner}{json.dumps(k)}: {_compact_json(v, indent + 1)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + pad + "}"


def write_manifest(models: dict):
    doc = {
        "version": MANIFEST_VERSION,
        "generator": "examples/zoo/export_zoo.py (see examples/zoo/README.md)",
        "paths": "relative to the repository root",
        "parity": {
            "shapes": "(batch, seq) = " + ", ".join(f"({b}, {s})" for b, s in PARITY_SHAPES),
            "inputs": f"torch.randn (or randint for input_ids), generator seed {PARITY_SEED}",
            "max_abs": "max |onnxruntime - torch| over the output",
            "max_rel": "max_abs / max |torch output|",
            "ok": f"max_abs <= {PARITY_TOLERANCE} * max(1, max |torch output|)",
        },
        "models": dict(sorted(models.items())),
    }
    MANIFEST.write_text(_compact_json(doc) + "\n")


def run_track(track: str, only: list[str] | None) -> int:
    pinned = TRACKS[track].torch
    if torch.__version__.split("+")[0] != pinned:
        sys.exit(f"export_zoo.py: torch {torch.__version__} is not the pinned {pinned}")
    names = [n for n, (t, _) in REGISTRY.items() if t == track and (not only or n in only)]
    failures = 0
    for name in names:
        print(f"[{track}] {name} ...", flush=True)
        try:
            entry = export_one(name, track)
        except Exception as e:  # report every model, then fail
            failures += 1
            print(f"[{track}] {name}: FAILED: {e}", file=sys.stderr, flush=True)
            continue
        models = json.loads(MANIFEST.read_text())["models"] if MANIFEST.exists() else {}
        models[name] = entry
        write_manifest(models)
        worst = max((c.get("max_abs", float("inf")) for c in entry["parity"]), default=0.0)
        flag = f" (validity: {entry['validity']})" if entry["validity"] != "any_input" else ""
        print(
            f"[{track}] {name}: {entry['size_bytes']} bytes, {entry['nodes']} nodes, "
            f"max |ort - torch| = {worst:.3g}{flag}",
            flush=True,
        )
    return failures


def run_all(only: list[str] | None) -> int:
    failures = 0
    for track, t in TRACKS.items():
        if only and not any(REGISTRY[n][0] == track for n in only):
            continue
        python = REPO_ROOT / t.venv / "bin" / "python"
        if not python.exists():
            print(
                f"export_zoo.py: {python} is missing; create it with\n"
                f"  python3 -m venv {t.venv} && {t.venv}/bin/pip install -r examples/zoo/{t.requirements}",
                file=sys.stderr,
            )
            failures += 1
            continue
        cmd = [str(python), str(Path(__file__).resolve()), "--track", track]
        if only:
            cmd += ["--only", *only]
        failures += subprocess.run(cmd, cwd=REPO_ROOT).returncode != 0
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="run every track, each in its own venv")
    parser.add_argument("--track", choices=sorted(TRACKS), help="fail unless this interpreter runs this track")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="export only these models")
    parser.add_argument("--list", action="store_true", help="list the models and their tracks")
    args = parser.parse_args(argv)
    if args.list:
        for name, (track, _) in REGISTRY.items():
            print(f"{name:28} {track}")
        return 0
    unknown = [n for n in args.only or [] if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown model(s): {', '.join(unknown)}; see --list")
    if args.all:
        return 1 if run_all(args.only) else 0
    track = current_track()
    if args.track and args.track != track:
        sys.exit(f"export_zoo.py: --track {args.track}, but transformers {transformers.__version__} is track {track}")
    return 1 if run_track(track, args.only) else 0


if __name__ == "__main__":
    sys.exit(main())
