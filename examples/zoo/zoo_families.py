"""The zoo's other MoE families: Qwen2-MoE (shared expert), DeepSeek-V3
(grouped sigmoid routing, selection bias) and Switch Transformers (capacity)
and GraniteMoE (parallel experts) on track "main" (transformers 4.51.3), and
GPT-OSS on track "v4.57" (transformers 4.57.6).
"""

from __future__ import annotations

import copy

import torch

from zoo_common import (
    FirstOutput,
    Gate,
    Model,
    block_model,
    experts_hit,
    gate_truth,
    hidden_input,
    input_reaching_all,
    model,
    seeded_block,
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
