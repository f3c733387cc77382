"""The zoo's Mixtral models: the MoE block through each exporter and form
(track "main": transformers 4.51.3, a loop over range(num_experts); "v4.57":
a loop over the experts hit; "v5": stacked expert weights), the contrib
MoE op, and a whole tiny MixtralForCausalLM.

MIXTRAL_BLOCK and MIXTRAL_TINY are read when a builder runs
(bench/export_models.py swaps in its own sizes).
"""

from __future__ import annotations

import numpy as np
import torch
from onnx import TensorProto, helper, numpy_helper

from zoo_common import (
    FirstOutput,
    Gate,
    HELPER_IR_VERSION,
    Logits,
    Model,
    TORCHSCRIPT_OPSET,
    TokenMajor,
    block_model,
    gate_truth,
    model,
    seeded_block,
)


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
