#!/usr/bin/env python3
"""Exports the zoo's custom track: MoE layers written outside transformers.

Each design below is a small torch module written for this corpus in the
style of one code base's MoE layer (Mistral's reference inference code,
DeepSeek-V3's and DeepSeek-MoE's own inference code, Megatron-Core, DeepSpeed/
GShard, Switch/t5x, Tutel/fairseq, research code that gathers expert weights,
Grok-1, V-MoE, OLMoE, JetMoE, makeMoE). None of them is a copy: each module
reproduces the idiom its authors use (how rows are selected per expert, how
results are written back, which gate, which activation), at tiny sizes with
fixed seeds.

Every design goes through torch.onnx.export with dynamo=True and dynamo=False
(TorchScript), at opsets 18 and 20. Where an exporter refuses the original
code, or exports it wrongly (TorchScript freezes data-dependent sizes), the
design's export-friendly variant, the rewrite a user would make, is exported
as well (file suffix `_friendly`), and the refusal is recorded. Every export
is checked with onnxruntime against torch at 1, 7 and 64 tokens (plus batch
2 x 5 tokens for [batch, seq, H] inputs); an export that disagrees is the
exporter's fault, recorded, never fitted.

    .venv-export-v5/bin/python examples/zoo/custom/export_custom.py            # export
    .venv-export-v5/bin/python examples/zoo/custom/export_custom.py --only mistral_ref
    .venv-export-v5/bin/python examples/zoo/custom/export_custom.py --moec-today  # detection table
    .venv-export-v5/bin/python examples/zoo/custom/export_custom.py --write-tests  # test/E2E/custom-*.test

Outputs (examples/zoo/custom/): NAME.onnx, NAME.npz (inputs and torch outputs
at 1, 7 and 64 tokens as `hidden_states_t<T>`, `output_t<T>`, the format of
test/lib/e2e.py --torch-reference) and manifest.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from torch import nn

# The v5 track's rule for what a committed export keeps (weights inline, no
# machine-specific metadata).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from export_zoo_v5 import clean_and_inline  # noqa: E402
from export_zoo_v5 import describe as describe_v5  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent
REPO_ROOT = OUT_DIR.parent.parent.parent
MANIFEST = OUT_DIR / "manifest.json"
E2E_DIR = REPO_ROOT / "test" / "E2E"

TORCH_VERSION = "2.15.0"
TOKENS = (1, 7, 64)
SEED = 100
# |ort - torch| <= PARITY_TOLERANCE * max(1, max |torch|), as the other tracks.
PARITY_TOLERANCE = 1e-4
EXPORTERS = ("dynamo", "torchscript")
OPSETS = (18, 20)
ort.set_default_logger_severity(3)


def init_weights(module: nn.Module, seed: int) -> nn.Module:
    """Matrices (and stacked [E, ...] weights) from N(0, 0.25^2), vectors from
    N(0, 0.1^2): outputs of O(1), so that a parity check means something."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(module.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=gen) * (0.25 if p.dim() >= 2 else 0.1))
    return module.eval()


# --------------------------------------------------------------------------- #
# Expert networks
# --------------------------------------------------------------------------- #


class SwiGLU(nn.Module):
    """w2(silu(w1 x) * w3 x), no biases: Mistral's, DeepSeek's and most LLMs' FFN."""

    def __init__(self, hidden, ffn):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class ReluFFN(nn.Module):
    """fc2(relu(fc1 x)), with biases (DeepSpeed users' experts are nn.Linear)."""

    def __init__(self, hidden, ffn, bias=True):
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn, bias=bias)
        self.fc2 = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


# --------------------------------------------------------------------------- #
# Designs. Each takes hidden_states and returns output of the same shape.
# `layout` is "bsh" ([batch, seq, H], both dynamic) or "th" ([tokens, H]).
# --------------------------------------------------------------------------- #


class MistralReference(nn.Module):
    """Mistral's reference inference code (mistral-inference's MoE layer).

    Idiom: topk on the router logits, softmax over the k selected logits, then
    per expert `rows, slot = torch.where(ids == e)` and
    `out[rows] += w[rows, slot, None] * expert(x[rows])` (index_put). The
    layer works on flattened tokens, [T, H]. SwiGLU experts.
    """

    layout = "th"
    hidden, ffn, experts, top_k = 32, 32, 8, 2

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(self.hidden, self.experts, bias=False)
        self.expert_list = nn.ModuleList(SwiGLU(self.hidden, self.ffn) for _ in range(self.experts))

    def forward(self, hidden_states):
        logits = self.gate(hidden_states)
        weights, ids = torch.topk(logits, self.top_k)
        weights = F.softmax(weights, dim=1, dtype=torch.float).to(hidden_states.dtype)
        out = torch.zeros_like(hidden_states)
        for e, expert in enumerate(self.expert_list):
            rows, slot = torch.where(ids == e)
            out[rows] += weights[rows, slot, None] * expert(hidden_states[rows])
        return out


class DeepSeekV3Gate(nn.Module):
    """DeepSeek-V3's own Gate: sigmoid scores, a bias used for selection only,
    group scores from the sum of each group's top-2, `masked_fill(-inf)` of the
    groups not kept, top-k, weights gathered from the unbiased scores,
    renormalised and times route_scale."""

    def __init__(self, hidden, experts, top_k, groups, topk_groups, route_scale, friendly=False):
        super().__init__()
        self.friendly = friendly
        self.top_k, self.groups, self.topk_groups, self.route_scale = top_k, groups, topk_groups, route_scale
        self.weight = nn.Parameter(torch.empty(experts, hidden))
        self.bias = nn.Parameter(torch.empty(experts))

    def forward(self, x):
        scores = F.linear(x, self.weight).sigmoid()
        original_scores = scores
        scores = scores + self.bias
        scores = scores.view(x.size(0), self.groups, -1)
        group_scores = scores.topk(2, dim=-1)[0].sum(dim=-1)
        keep = group_scores.topk(self.topk_groups, dim=-1)[1]
        if self.friendly:
            # TorchScript cannot export scatter_ of a bool scalar.
            drop = scores.new_ones(x.size(0), self.groups).scatter_(1, keep, 0.0).bool()
        else:
            drop = scores.new_ones(x.size(0), self.groups, dtype=torch.bool).scatter_(1, keep, False)
        scores = scores.masked_fill(drop.unsqueeze(-1), float("-inf")).flatten(1)
        ids = torch.topk(scores, self.top_k, dim=-1)[1]
        weights = original_scores.gather(1, ids)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights * self.route_scale
        return weights.type_as(x), ids


class DeepSeekV3Inference(nn.Module):
    """DeepSeek-V3's own inference code (its MoE module, not transformers').

    Idiom: DeepSeekV3Gate above; counts per expert from `bincount(...).tolist()`
    to skip experts without tokens, then per expert `idx, top = where(ids == e)`
    and `y[idx] += expert(x[idx]) * weights[idx, top, None]`; one shared SwiGLU
    expert added. The export-friendly variant drops the bincount/tolist branch
    (dynamo cannot trace `.tolist()` control flow) and loops over every expert,
    and builds the group mask by scattering a float 0 into ones, then `.bool()`
    (TorchScript cannot export `scatter_` of the bool scalar False).
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 32, 32, 8, 2
    groups, topk_groups, route_scale = 4, 2, 2.5
    has_friendly = True

    def __init__(self, friendly=False):
        super().__init__()
        self.friendly = friendly
        self.gate = DeepSeekV3Gate(self.hidden, self.experts, self.top_k, self.groups, self.topk_groups,
                                   self.route_scale, friendly=bool(friendly))
        self.expert_list = nn.ModuleList(SwiGLU(self.hidden, self.ffn) for _ in range(self.experts))
        self.shared_experts = SwiGLU(self.hidden, self.ffn)

    def init(self, seed):
        init_weights(self, seed)
        # The selection bias moves about half the selections; scores kept in
        # positive territory avoid exact ties with -inf-masked groups.
        gen = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            self.gate.bias.copy_(torch.rand(self.experts, generator=gen) * 0.3 - 0.05)
        return self

    def forward(self, hidden_states):
        shape = hidden_states.size()
        x = hidden_states.view(-1, self.hidden)
        weights, ids = self.gate(x)
        y = torch.zeros_like(x)
        if self.friendly:
            for e in range(self.experts):
                idx, top = torch.where(ids == e)
                y[idx] += self.expert_list[e](x[idx]) * weights[idx, top, None]
        else:
            counts = torch.bincount(ids.flatten(), minlength=self.experts).tolist()
            for e in range(self.experts):
                if counts[e] == 0:
                    continue
                idx, top = torch.where(ids == e)
                y[idx] += self.expert_list[e](x[idx]) * weights[idx, top, None]
        z = self.shared_experts(x)
        return (y + z).view(shape)


class DeepSeekMoE(nn.Module):
    """DeepSeek-MoE's own modelling code (deepseek-moe-16b).

    Gate: softmax over all experts, top-k, no renormalisation; two shared
    experts (one SwiGLU of twice the width) added to the routed sum.
    Original (its inference path): `argsort` of the flattened ids, counts from
    `bincount().cpu().numpy().cumsum(0)`, per-expert slices of the sorted
    assignments, results multiplied by their weights and written back with
    `scatter_reduce_(..., reduce="sum")`. The export-friendly variant is the
    same file's training path: tokens `repeat_interleave`d k times,
    `y[flat_ids == e] = expert(x[flat_ids == e])` (boolean-mask index_put),
    then a [T, k, H] weighted sum.
    """

    layout = "bsh"
    hidden, ffn, experts, top_k, shared = 32, 32, 8, 2, 2
    has_friendly = True

    def __init__(self, friendly=False):
        super().__init__()
        self.friendly = friendly
        self.gate_weight = nn.Parameter(torch.empty(self.experts, self.hidden))
        self.expert_list = nn.ModuleList(SwiGLU(self.hidden, self.ffn) for _ in range(self.experts))
        self.shared_experts = SwiGLU(self.hidden, self.ffn * self.shared)

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.view(-1, self.hidden)
        scores = F.linear(x, self.gate_weight).softmax(dim=-1)
        topk_weight, topk_idx = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        flat_idx = topk_idx.view(-1)
        if self.friendly:
            xs = x.repeat_interleave(self.top_k, dim=0)
            y = torch.empty_like(xs)
            for e, expert in enumerate(self.expert_list):
                y[flat_idx == e] = expert(xs[flat_idx == e])
            y = (y.view(*topk_weight.shape, -1) * topk_weight.unsqueeze(-1)).sum(dim=1)
        else:
            y = self.moe_infer(x, flat_idx, topk_weight.view(-1, 1))
        return (y + self.shared_experts(x)).view(shape)

    def moe_infer(self, x, flat_idx, flat_weight):
        cache = torch.zeros_like(x)
        order = flat_idx.argsort()
        ends = flat_idx.bincount().cpu().numpy().cumsum(0)
        token_of = order // self.top_k
        for e, end in enumerate(ends):
            start = 0 if e == 0 else ends[e - 1]
            if start == end:
                continue
            rows = token_of[start:end]
            out = self.expert_list[e](x[rows])
            out = out * flat_weight[order[start:end]]
            cache.scatter_reduce_(0, rows.view(-1, 1).repeat(1, x.shape[-1]), out, reduce="sum")
        return cache


class MegatronPermute(nn.Module):
    """Megatron-Core's dropless token dispatcher with a SequentialMLP.

    Router: topk on the logits, softmax over the k. Permute: `argsort`
    (stable) of the flattened ids, rows gathered with
    `index_select(sorted // k)`. Experts: per-expert slices `[start:end]` of
    the permuted rows, bounds from the cumsum of the counts (`torch.histc` of
    the ids), fc1 fused [2F, H] `chunk`ed into gate and up, SwiGLU, outputs
    `cat`ed. Unpermute: `scatter_add` of the rows back to their [T*k] slots,
    then a [T, k, H] weighted sum.

    The export-friendly variant counts with a scattered [T, E] routing map's
    `sum(0)` (as newer Megatron does; TorchScript has no histc) and calls
    `argsort` without `stable=True` (dynamo has no ONNX translation of the
    stable sort, TorchScript none of its out parameter); the result is the
    same, as unpermute puts each row back in its slot.
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 32, 32, 4, 2
    has_friendly = True

    def __init__(self, friendly=False):
        super().__init__()
        self.friendly = friendly
        self.router = nn.Linear(self.hidden, self.experts, bias=False)
        self.fc1 = nn.ModuleList(nn.Linear(self.hidden, 2 * self.ffn, bias=False) for _ in range(self.experts))
        self.fc2 = nn.ModuleList(nn.Linear(self.ffn, self.hidden, bias=False) for _ in range(self.experts))

    def forward(self, hidden_states):
        shape = hidden_states.shape
        tokens = hidden_states.reshape(-1, shape[-1])
        logits = self.router(tokens)
        scores, ids = torch.topk(logits, k=self.top_k, dim=1)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        flat = ids.flatten()
        if self.friendly:
            counts = torch.zeros_like(logits).scatter(1, ids, 1.0).sum(dim=0).long()
        else:
            counts = torch.histc(ids.float(), bins=self.experts, min=0, max=self.experts - 1).long()
        # permute
        if self.friendly:
            sorted_indices = torch.argsort(flat)
        else:
            sorted_indices = torch.argsort(flat, stable=True)
        permuted = tokens.index_select(0, sorted_indices // self.top_k)
        # experts over contiguous segments
        ends = torch.cumsum(counts, dim=0)
        outputs, start = [], 0
        for e in range(self.experts):
            end = ends[e]
            gate, up = torch.chunk(self.fc1[e](permuted[start:end]), 2, dim=-1)
            outputs.append(self.fc2[e](F.silu(gate) * up))
            start = end
        output_local = torch.cat(outputs, dim=0)
        # unpermute
        unpermuted = torch.zeros_like(output_local)
        unpermuted = unpermuted.scatter_add(0, sorted_indices.unsqueeze(1).expand(-1, shape[-1]), output_local)
        unpermuted = unpermuted.reshape(-1, self.top_k, shape[-1]) * probs.unsqueeze(-1)
        return unpermuted.sum(dim=1).reshape(shape)


class GShardTop2Capacity(nn.Module):
    """DeepSpeed's sharded MoE (GShard top-2 gating) with a static capacity.

    Idiom: softmax gates [S, E]; first choice by argmax, second by argmax of
    the logits with the first masked to -inf; one-hot masks, slot positions
    from `cumsum(mask, 0) - 1` (second choices after all first choices),
    assignments at or beyond the capacity dropped; gates renormalised over
    the two kept; combine [S, E, C] = gate x one_hot(slot); dispatch =
    combine.bool(); `einsum("sec,sm->ecm")`; each expert (ReLU FFN with
    biases) on its [C, M] chunk; `einsum("sec,ecm->sm")`. Inference: no
    gumbel noise on the second choice. Capacity 24: nothing drops at 1 and 7
    tokens, some assignments drop at 64.
    """

    layout = "bsh"
    hidden, ffn, experts, top_k, capacity = 32, 32, 4, 2, 24

    def __init__(self):
        super().__init__()
        self.wg = nn.Linear(self.hidden, self.experts, bias=False)
        self.expert_list = nn.ModuleList(ReluFFN(self.hidden, self.ffn) for _ in range(self.experts))

    def top2gating(self, logits):
        gates = F.softmax(logits, dim=1)
        idx1 = torch.argmax(gates, dim=1)
        mask1 = F.one_hot(idx1, num_classes=self.experts)
        logits_except1 = logits.masked_fill(mask1.bool(), float("-inf"))
        idx2 = torch.argmax(logits_except1, dim=1)
        mask2 = F.one_hot(idx2, num_classes=self.experts)
        loc1 = torch.cumsum(mask1, dim=0) - 1
        loc2 = torch.cumsum(mask2, dim=0) - 1
        loc2 = loc2 + torch.sum(mask1, dim=0, keepdim=True)
        mask1 = mask1 * torch.lt(loc1, self.capacity)
        mask2 = mask2 * torch.lt(loc2, self.capacity)
        loc1_s = torch.sum(loc1 * mask1, dim=1)
        loc2_s = torch.sum(loc2 * mask2, dim=1)
        mask1_f, mask2_f = mask1.float(), mask2.float()
        gates1_s = torch.einsum("se,se->s", gates, mask1_f)
        gates2_s = torch.einsum("se,se->s", gates, mask2_f)
        denom = torch.clamp(gates1_s + gates2_s, min=torch.finfo(gates.dtype).eps)
        gates1_s, gates2_s = gates1_s / denom, gates2_s / denom
        gates1 = torch.einsum("s,se->se", gates1_s, mask1_f)
        gates2 = torch.einsum("s,se->se", gates2_s, mask2_f)
        loc1_sc = F.one_hot(loc1_s, num_classes=self.capacity).float()
        loc2_sc = F.one_hot(loc2_s, num_classes=self.capacity).float()
        combine = torch.einsum("se,sc->sec", gates1, loc1_sc) + torch.einsum("se,sc->sec", gates2, loc2_sc)
        return combine, combine.bool()

    def forward(self, hidden_states):
        d_model = hidden_states.shape[-1]
        reshaped = hidden_states.reshape(-1, d_model)
        combine, dispatch = self.top2gating(self.wg(reshaped))
        dispatched = torch.einsum("sec,sm->ecm", dispatch.type_as(reshaped), reshaped)
        outputs = [expert(chunk) for expert, chunk in zip(self.expert_list, dispatched.chunk(self.experts, dim=0))]
        expert_output = torch.cat(outputs, dim=0)
        combined = torch.einsum("sec,ecm->sm", combine.type_as(reshaped), expert_output)
        return combined.reshape(hidden_states.shape)


class SwitchTop1Capacity(nn.Module):
    """Switch Transformer as t5x/flaxformer write it, ported to torch.

    Idiom: tokens and router logits flattened to [T, E]; softmax, top-1 by
    argmax; priority = `cumsum(one_hot, 0) * one_hot - 1`; dispatch [T, E, C]
    = (priority == arange(C)) (jax.nn.one_hot semantics: -1 and >= C give
    zero rows); combine = probs x dispatch; `einsum("th,tec->ech")`; experts
    as stacked [E, H, F] weights in one einsum (vmapped experts), ReLU, no
    biases (T5's DenseReluDense); `einsum("ech,tec->th")`. Dropped tokens
    give zero (the residual outside the layer carries them). Capacity 12.
    """

    layout = "bsh"
    hidden, ffn, experts, top_k, capacity = 32, 32, 4, 1, 12

    def __init__(self):
        super().__init__()
        self.router = nn.Parameter(torch.empty(self.hidden, self.experts))
        self.wi = nn.Parameter(torch.empty(self.experts, self.hidden, self.ffn))
        self.wo = nn.Parameter(torch.empty(self.experts, self.ffn, self.hidden))

    def forward(self, hidden_states):
        tokens = hidden_states.reshape(-1, self.hidden)
        logits = tokens @ self.router
        probs = torch.softmax(logits, dim=-1)
        expert_index = torch.argmax(probs, dim=-1)
        mask = F.one_hot(expert_index, self.experts)
        priority = torch.cumsum(mask, dim=0) * mask - 1
        priority = priority.max(dim=-1).values
        dispatch = (priority[:, None, None] == torch.arange(self.capacity)).to(tokens.dtype)
        dispatch = dispatch * mask[:, :, None].to(tokens.dtype)
        combine = probs[:, :, None] * dispatch
        expert_inputs = torch.einsum("th,tec->ech", tokens, dispatch)
        h = F.relu(torch.einsum("ech,ehf->ecf", expert_inputs, self.wi))
        expert_outputs = torch.einsum("ecf,efh->ech", h, self.wo)
        out = torch.einsum("ech,tec->th", expert_outputs, combine)
        return out.reshape(hidden_states.shape)


class TutelDenseMask(nn.Module):
    """Tutel/fairseq-style dense-masked MoE, written to avoid dispatch kernels.

    Idiom: top-k of the logits, softmax over the k, the k weights scattered
    into a dense [T, E] zero matrix; every expert on every token with stacked
    [E, H, F] + bias weights (`einsum("th,ehf->tef")`), ReLU; the outputs
    combined with `einsum("te,teh->th")` (zero outside the top-k).
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 32, 32, 4, 2

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(self.hidden, self.experts, bias=False)
        self.fc1_w = nn.Parameter(torch.empty(self.experts, self.hidden, self.ffn))
        self.fc1_b = nn.Parameter(torch.empty(self.experts, 1, self.ffn))
        self.fc2_w = nn.Parameter(torch.empty(self.experts, self.ffn, self.hidden))
        self.fc2_b = nn.Parameter(torch.empty(self.experts, 1, self.hidden))

    def forward(self, hidden_states):
        x = hidden_states.reshape(-1, self.hidden)
        logits = self.gate(x)
        top_v, top_i = torch.topk(logits, self.top_k, dim=-1)
        dense = torch.zeros_like(logits).scatter(1, top_i, torch.softmax(top_v, dim=-1))
        h = torch.einsum("th,ehf->tef", x, self.fc1_w) + self.fc1_b.transpose(0, 1)
        y = torch.einsum("tef,efh->teh", F.relu(h), self.fc2_w) + self.fc2_b.transpose(0, 1)
        return torch.einsum("te,teh->th", dense, y).reshape(hidden_states.shape)


class GatheredWeightBmm(nn.Module):
    """Research code that gathers each assignment's expert weights.

    Idiom: softmax router, top-k, renormalised; `w1[ids]` gives [T*k, F, H]
    (and `w2[ids]` [T*k, H, F]), tokens `repeat_interleave`d k times, `bmm`
    per assignment; ReLU² activation (Primer); [T, k, H] weighted sum.
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 32, 32, 4, 2

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(self.hidden, self.experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(self.experts, self.ffn, self.hidden))
        self.w2 = nn.Parameter(torch.empty(self.experts, self.hidden, self.ffn))

    def forward(self, hidden_states):
        x = hidden_states.reshape(-1, self.hidden)
        probs = torch.softmax(self.router(x), dim=-1)
        w, ids = torch.topk(probs, self.top_k, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        flat = ids.reshape(-1)
        xr = x.repeat_interleave(self.top_k, dim=0)
        h = torch.bmm(self.w1[flat], xr.unsqueeze(-1)).squeeze(-1)
        h = F.relu(h).square()
        y = torch.bmm(self.w2[flat], h.unsqueeze(-1)).squeeze(-1)
        y = (y.view(-1, self.top_k, self.hidden) * w.unsqueeze(-1)).sum(dim=1)
        return y.reshape(hidden_states.shape)


class Grok1GeGLU(nn.Module):
    """Grok-1's MoE layer (JAX release) as a torch port writes it.

    Gate: softmax of the router logits in float32, top-2, the probabilities
    of the two kept as they are (no renormalisation). Experts: GeGLU with the
    tanh GELU, `w_out(gelu_tanh(w_gate x) * w_v x)`. Loop over experts with
    `torch.where(ids == e)` and `out.index_add_(0, rows, ...)`.
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 32, 32, 8, 2

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(self.hidden, self.experts, bias=False)
        self.w_gate = nn.ModuleList(nn.Linear(self.hidden, self.ffn, bias=False) for _ in range(self.experts))
        self.w_v = nn.ModuleList(nn.Linear(self.hidden, self.ffn, bias=False) for _ in range(self.experts))
        self.w_out = nn.ModuleList(nn.Linear(self.ffn, self.hidden, bias=False) for _ in range(self.experts))

    def forward(self, hidden_states):
        x = hidden_states.reshape(-1, self.hidden)
        probs = torch.softmax(self.router(x).float(), dim=-1)
        gate, ids = torch.topk(probs, self.top_k, dim=-1)
        out = torch.zeros_like(x)
        for e in range(self.experts):
            rows, slot = torch.where(ids == e)
            xe = x[rows]
            h = F.gelu(self.w_gate[e](xe), approximate="tanh") * self.w_v[e](xe)
            out.index_add_(0, rows, self.w_out[e](h) * gate[rows, slot].unsqueeze(-1))
        return out.reshape(hidden_states.shape)


class VMoEGelu(nn.Module):
    """V-MoE's MLP experts (GELU, with biases) in a torch port.

    Gate: softmax over the logits, top-2, no renormalisation, the kept
    probabilities scattered into a [T, E] combine matrix. Loop over experts:
    rows from `combine[:, e].nonzero()`, `out.index_add_` of the expert output
    times `combine[rows, e]`. Experts: fc2(gelu(fc1 x + b1)) + b2 with the erf
    GELU (torch's nn.GELU(); flax's default would be the tanh one). V-MoE's
    capacity is left out (inference at a capacity ratio that drops nothing).
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 32, 32, 8, 2

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(self.hidden, self.experts, bias=False)
        self.expert_list = nn.ModuleList(
            nn.Sequential(nn.Linear(self.hidden, self.ffn), nn.GELU(), nn.Linear(self.ffn, self.hidden))
            for _ in range(self.experts))

    def forward(self, hidden_states):
        x = hidden_states.reshape(-1, self.hidden)
        probs = torch.softmax(self.router(x), dim=-1)
        top_v, top_i = torch.topk(probs, self.top_k, dim=-1)
        combine = torch.zeros_like(probs).scatter(1, top_i, top_v)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.expert_list):
            rows = combine[:, e].nonzero().squeeze(-1)
            out.index_add_(0, rows, expert(x[rows]) * combine[rows, e].unsqueeze(-1))
        return out.reshape(hidden_states.shape)


class OLMoE(nn.Module):
    """OLMoE (the authors' transformers implementation).

    Gate: softmax over all experts in float32, top-8, no renormalisation.
    Loop: a one-hot expert mask permuted to [E, k, T], `where(mask[e])` for the
    slots and tokens, `index_add_`. SwiGLU experts. 16 experts so that top-8
    still selects (OLMoE: 64 experts, top-8).
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 16, 16, 16, 8

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(self.hidden, self.experts, bias=False)
        self.expert_list = nn.ModuleList(SwiGLU(self.hidden, self.ffn) for _ in range(self.experts))

    def forward(self, hidden_states):
        x = hidden_states.view(-1, self.hidden)
        routing = F.softmax(self.gate(x), dim=1, dtype=torch.float)
        routing, selected = torch.topk(routing, self.top_k, dim=-1)
        routing = routing.to(x.dtype)
        mask = F.one_hot(selected, num_classes=self.experts).permute(2, 1, 0)
        out = torch.zeros_like(x)
        for e in range(self.experts):
            slot, tok = torch.where(mask[e])
            y = self.expert_list[e](x[tok]) * routing[tok, slot, None]
            out.index_add_(0, tok, y.to(x.dtype))
        return out.view(hidden_states.shape)


class JetMoE(nn.Module):
    """JetMoE's MoE layer (scattermoe-style "parallel experts").

    Gate: topk on the logits, softmax over the k. Gating: the [T*k] flat
    expert ids `sort`ed, token of each assignment `div(k, "trunc")`, counts
    from a scattered [T, E] one-hot's `sum(0)`. Experts: stacked [E, out, in]
    weights; the sorted rows `split` by the counts (`expert_size.tolist()`),
    one `F.linear` per expert, `cat`; input linear [2F, H] chunked into
    (gate, up) and SiLU-gated; output weighted per row, then
    `zeros.index_add(0, batch_index, ...)` (not in place) and an output bias.
    The export-friendly variant (for TorchScript, which freezes the split
    sizes) replaces the split with a mask over the sorted ids per expert, and
    the index_add with a scatter_add (TorchScript's index_add drops repeated
    indices' contributions).
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 32, 32, 4, 2
    has_friendly = True

    def __init__(self, friendly=False):
        super().__init__()
        self.friendly = friendly
        self.router = nn.Linear(self.hidden, self.experts, bias=False)
        self.input_weight = nn.Parameter(torch.empty(self.experts, 2 * self.ffn, self.hidden))
        self.output_weight = nn.Parameter(torch.empty(self.experts, self.hidden, self.ffn))
        self.bias = nn.Parameter(torch.empty(self.hidden))

    def parallel_linear(self, inputs, weight, expert_size, sorted_experts):
        if self.friendly:
            out = inputs.new_zeros(inputs.shape[0], weight.shape[1])
            for e in range(self.experts):
                sel = sorted_experts == e
                out[sel] = F.linear(inputs[sel], weight[e])
            return out
        chunks = inputs.split(expert_size.tolist(), dim=0)
        return torch.cat([F.linear(chunks[e], weight[e]) for e in range(self.experts)], dim=0)

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, self.hidden)
        logits = self.router(x)
        top_logits, top_idx = logits.topk(self.top_k, dim=1)
        top_gates = torch.softmax(top_logits, dim=1).type_as(x)
        gates = torch.zeros_like(logits).scatter(1, top_idx, 1)
        expert_size = gates.long().sum(0)
        sorted_experts, index_sorted = top_idx.flatten().sort(0)
        batch_index = index_sorted.div(self.top_k, rounding_mode="trunc")
        batch_gates = top_gates.flatten()[index_sorted]
        h = self.parallel_linear(x[batch_index], self.input_weight, expert_size, sorted_experts)
        h, up = h.chunk(2, dim=-1)
        h = F.silu(h) * up
        y = self.parallel_linear(h, self.output_weight, expert_size, sorted_experts)
        y = y * batch_gates[:, None]
        if self.friendly:
            out = torch.zeros_like(x).scatter_add(0, batch_index[:, None].expand(-1, self.hidden), y)
        else:
            out = torch.zeros_like(x).index_add(0, batch_index, y)
        return (out + self.bias).reshape(shape)


class MakeMoE(nn.Module):
    """makeMoE (a widely copied from-scratch tutorial) on [batch, seq, H].

    Gate: top-k of the [B, T, E] logits scattered into a tensor of -inf, then
    softmax over all experts (so exactly the top-k are non-zero, renormalised).
    Loop: `mask = (ids == e).any(-1)` over [B, T], `if mask.any()`,
    `x_flat[mask_flat]`, expert (ReLU FFN, 4x wide, with biases), times the
    expert's column of the gate, `out[mask] += y.squeeze(1)`. The
    export-friendly variant drops the `if mask.any()` (dynamo cannot guard on
    it) and the `squeeze(1)` (a no-op in torch that dynamo writes as a Squeeze
    of the hidden axis, an invalid model). Traced on a seed that gives every
    expert at least two tokens.
    """

    layout = "bsh"
    hidden, ffn, experts, top_k = 16, 64, 8, 2
    has_friendly = True
    trace_seed = 7

    def __init__(self, friendly=False):
        super().__init__()
        self.friendly = friendly
        self.route = nn.Linear(self.hidden, self.experts)
        self.expert_list = nn.ModuleList(ReluFFN(self.hidden, self.ffn) for _ in range(self.experts))

    def forward(self, hidden_states):
        logits = self.route(hidden_states)
        top_logits, ids = logits.topk(self.top_k, dim=-1)
        sparse = torch.full_like(logits, float("-inf")).scatter(-1, ids, top_logits)
        gating = F.softmax(sparse, dim=-1)
        out = torch.zeros_like(hidden_states)
        flat_x = hidden_states.view(-1, hidden_states.size(-1))
        flat_gating = gating.view(-1, gating.size(-1))
        for e, expert in enumerate(self.expert_list):
            mask = (ids == e).any(dim=-1)
            flat_mask = mask.view(-1)
            if self.friendly:
                out[mask] += expert(flat_x[flat_mask]) * flat_gating[flat_mask, e].unsqueeze(1)
            elif flat_mask.any():
                y = expert(flat_x[flat_mask]) * flat_gating[flat_mask, e].unsqueeze(1)
                out[mask] += y.squeeze(1)
        return out


DESIGNS = {
    "mistral_ref": MistralReference,
    "deepseek_v3_ref": DeepSeekV3Inference,
    "deepseek_moe": DeepSeekMoE,
    "megatron_permute": MegatronPermute,
    "gshard_top2_capacity": GShardTop2Capacity,
    "switch_top1_capacity": SwitchTop1Capacity,
    "tutel_dense_mask": TutelDenseMask,
    "gathered_bmm": GatheredWeightBmm,
    "grok1_geglu": Grok1GeGLU,
    "vmoe_gelu": VMoEGelu,
    "olmoe": OLMoE,
    "jetmoe": JetMoE,
    "makemoe": MakeMoE,
}

# The gate and expert of each design, in the words of the main zoo manifest:
# what a detector should recover.
GROUND_TRUTH = {
    "mistral_ref": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="silu_glu"),
    "deepseek_v3_ref": dict(score="sigmoid", topk_before_softmax=False, normalize=True, selection_bias=True,
                            n_group=4, topk_group=2, routed_scaling_factor=2.5, activation="silu_glu",
                            shared_experts={"count": 1, "ffn": 32, "gate": "none"}),
    "deepseek_moe": dict(score="softmax", topk_before_softmax=False, normalize=False, activation="silu_glu",
                         shared_experts={"count": 2, "ffn": 64, "gate": "none"}),
    "megatron_permute": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="silu_glu"),
    "gshard_top2_capacity": dict(score="softmax", topk_before_softmax=False, normalize=True, capacity=24,
                                 activation="relu", expert_bias=True),
    "switch_top1_capacity": dict(score="softmax", topk_before_softmax=False, normalize=False, capacity=12,
                                 activation="relu", dropped="zero"),
    "tutel_dense_mask": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="relu",
                             expert_bias=True),
    "gathered_bmm": dict(score="softmax", topk_before_softmax=False, normalize=True, activation="relu_squared"),
    "grok1_geglu": dict(score="softmax", topk_before_softmax=False, normalize=False, activation="gelu_tanh_glu"),
    "vmoe_gelu": dict(score="softmax", topk_before_softmax=False, normalize=False, activation="gelu_erf",
                      expert_bias=True),
    "olmoe": dict(score="softmax", topk_before_softmax=False, normalize=False, activation="silu_glu"),
    "jetmoe": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="silu_glu",
                   output_bias=True),
    "makemoe": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="relu",
                    expert_bias=True, router_bias=True),
}


def build(name: str, friendly=False) -> nn.Module:
    """The design's module; `friendly` is False (the original code) or the
    exporter whose export-friendly variant is wanted."""
    cls = DESIGNS[name]
    torch.manual_seed(1)
    module = cls(friendly=friendly) if getattr(cls, "has_friendly", False) else cls()
    seed = 1 + sorted(DESIGNS).index(name)
    if hasattr(module, "init"):
        module.init(seed)
    else:
        init_weights(module, seed)
    return module.eval()


# --------------------------------------------------------------------------- #
# Inputs, export, parity
# --------------------------------------------------------------------------- #


def shaped(layout: str, batch: int, tokens: int, hidden: int, gen) -> torch.Tensor:
    if layout == "th":
        return torch.randn(batch * tokens, hidden, generator=gen)
    return torch.randn(batch, tokens, hidden, generator=gen)


def trace_sample(cls) -> torch.Tensor:
    """32 tokens (2 x 16): no size of the trace equals a size that is checked
    (1, 7, 64, 2 x 5), and (per design's seed) every expert gets at least two
    tokens: TorchScript specialises an expert traced with one."""
    return shaped(cls.layout, 2, 16, cls.hidden, torch.Generator().manual_seed(getattr(cls, "trace_seed", 2)))


def export(module, sample, path: Path, exporter: str, opset: int, layout: str):
    names = dict(input_names=["hidden_states"], output_names=["output"])
    if exporter == "dynamo":
        if layout == "th":
            dyn = ({0: torch.export.Dim("tokens")},)
        else:
            dyn = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},)
        program = torch.onnx.export(module, (sample,), dynamo=True, opset_version=opset, dynamic_shapes=dyn,
                                    verbose=False, **names)
        program.save(str(path))
    else:
        axes = {0: "tokens"} if layout == "th" else {0: "batch", 1: "seq"}
        torch.onnx.export(module, (sample,), str(path), dynamo=False, opset_version=opset,
                          dynamic_axes={"hidden_states": axes, "output": axes}, **names)


@contextlib.contextmanager
def quiet():
    """Silences the exporters, whose C++ side prints whole graphs on errors."""
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sys.stdout.flush()
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def first_line(e: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    if "## Exception summary" in text:
        # dynamo wraps the error of torch.export or of its translation: the
        # summary's first line says which and why.
        summary = [l.strip() for l in text.split("## Exception summary", 1)[1].splitlines() if l.strip()]
        step = re.search(r"step \d/3", text)
        return f"{type(e).__name__} ({step.group(0) if step else 'export'}): {summary[0][:400]}"
    reason = f"{type(e).__name__}: {text.splitlines()[0][:300]}" if text else type(e).__name__
    for line in text.splitlines()[1:]:
        if any(key in line for key in ("Could not guard", "data-dependent", "No ONNX function", "not supported",
                                       "Unsupported", "Could not extract")):
            reason += " | " + line.strip()[:300]
            break
    return reason


def parity(want: np.ndarray, got: np.ndarray) -> dict:
    if want.shape != got.shape:
        return {"ok": False, "error": f"shape {list(got.shape)} != torch {list(want.shape)}"}
    err = float(np.max(np.abs(want.astype(np.float64) - got))) if want.size else 0.0
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    return {"ok": err <= PARITY_TOLERANCE * scale, "max_abs": err}


def check(path: Path, module, layout: str, hidden: int) -> tuple[dict, dict]:
    """onnxruntime against torch at 1, 7 and 64 tokens (saved for the .npz)
    and at batch 2 x 5 tokens; returns (checks, arrays)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        session, load_error = None, f"onnxruntime: {str(e).strip().splitlines()[0][:300]}"
    gen = torch.Generator().manual_seed(SEED)
    cases = [(str(t), 1, t) for t in TOKENS] + [("2x5", 2, 5)]
    checks, arrays = {}, {}
    for label, batch, tokens in cases:
        x = shaped(layout, batch, tokens, hidden, gen)
        with torch.no_grad():
            want = module(x).numpy()
        if batch == 1:
            arrays[f"hidden_states_t{tokens}"] = x.numpy()
            arrays[f"output_t{tokens}"] = want
        if session is None:
            checks[label] = {"ok": False, "error": load_error}
            continue
        try:
            (got,) = session.run(["output"], {"hidden_states": x.numpy()})
            checks[label] = parity(want, got)
        except Exception as e:
            checks[label] = {"ok": False, "error": f"onnxruntime: {str(e).strip().splitlines()[0][:300]}"}
    return checks, arrays


def describe(model: onnx.ModelProto, path: Path) -> dict:
    """The v5 track's manifest record of an export, with its ai.onnx opset."""
    record = describe_v5(model, path)
    record["opset"] = record["opsets"]["ai.onnx"]
    return record


def export_one(name: str, exporter: str, opset: int, friendly: bool) -> dict:
    """Exports one (design, code, exporter, opset); returns its record (with
    `refusal` instead of a file when the exporter refuses)."""
    cls = DESIGNS[name]
    entry = f"{name}_{exporter}_op{opset}" + ("_friendly" if friendly else "")
    module = build(name, exporter if friendly else False)
    path = OUT_DIR / f"{entry}.onnx"
    record = {"design": name, "class": cls.__name__, "code": "export-friendly" if friendly else "original",
              "exporter": exporter, "opset_requested": opset, "layout": cls.layout,
              "sizes": {"hidden": cls.hidden, "ffn": cls.ffn, "experts": cls.experts, "top_k": cls.top_k},
              "gate": {"num_experts": cls.experts, "top_k": cls.top_k, **GROUND_TRUTH[name]},
              "torch": torch.__version__.split("+")[0]}
    try:
        with quiet():
            export(module, trace_sample(cls), path, exporter, opset, cls.layout)
        model = clean_and_inline(path)
    except Exception as e:  # the exporter's refusal is a result
        record["refusal"] = first_line(e)
        for leftover in (path, path.with_name(path.name + ".data")):
            if leftover.exists():
                leftover.unlink()
        print(f"  {entry}: refused: {record['refusal'][:160]}")
        return {entry: record}
    module.eval()
    record.update(describe(model, path))
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # an invalid model is the exporter's, like a wrong one
        record["checker_error"] = first_line(e)
    checks, arrays = check(path, module, cls.layout, cls.hidden)
    np.savez_compressed(OUT_DIR / f"{entry}.npz", **arrays)
    record["reference"] = str((OUT_DIR / f"{entry}.npz").relative_to(REPO_ROOT))
    record["ort_vs_torch"] = checks
    record["ort_matches_torch"] = all(c["ok"] for c in checks.values())
    if not record["ort_matches_torch"]:
        record["validity"] = "exporter-wrong"
    if record["opset"] != opset:
        record["note_opset"] = f"asked for opset {opset}, the file has {record['opset']}"
    print(f"  {entry}: {record['size_bytes']} bytes, opset {record['opset']}, "
          f"ort = torch: {record['ort_matches_torch']}"
          + ("" if record["ort_matches_torch"] else f" {json.dumps(checks)[:200]}"))
    return {entry: record}


def export_design(name: str, results: dict):
    print(name)
    for exporter in EXPORTERS:
        for opset in OPSETS:
            got = export_one(name, exporter, opset, friendly=False)
            results.update(got)
            (record,) = got.values()
            failed = "refusal" in record or not record["ort_matches_torch"]
            if failed and getattr(DESIGNS[name], "has_friendly", False):
                results.update(export_one(name, exporter, opset, friendly=True))


# --------------------------------------------------------------------------- #
# moec today, README table, E2E test
# --------------------------------------------------------------------------- #


def moec_today(results: dict, moec: Path):
    """Runs `moec compile --max-tokens 64` on every export: layers detected
    (from the summary line) and the first remark or error line."""
    for entry, record in sorted(results.items()):
        if "file" not in record:
            continue
        proc = subprocess.run([str(moec), "compile", str(REPO_ROOT / record["file"]), "-o", "/tmp/custom_zoo_p.bin",
                               "--max-tokens", "64"], capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        summary = re.search(r"moec: wrote [^\n]*?: (no MoE layer[^,\n]*|(\d+) MoE layers? \(([^)]*)\))", text)
        name = Path(record["file"]).name
        # The file's directory is dropped, so that the record reads the same
        # on every machine.
        lines = [l.strip().replace(str(REPO_ROOT / record["file"]), name) for l in text.splitlines()]
        remark = next((l for l in lines if l.startswith("moec: remark:")), None)
        error = next((l for l in lines if l.startswith("moec: error:")), None)
        layers = int(summary.group(2)) if summary and summary.group(2) else 0
        record["moec_today"] = {
            "rc": proc.returncode,
            "moe_layers": layers if proc.returncode == 0 else None,
            "form": summary.group(3) if summary and summary.group(3) else None,
            "summary": summary.group(0) if summary else None,
            "first_remark": remark,
            "error": error if proc.returncode else None,
        }
        print(f"  {entry}: rc {proc.returncode}, {layers} layer(s); {(remark or error or '')[:120]}")


def write_tests(results: dict):
    """test/E2E/custom-<design>.test: one RUN line per export that onnxruntime
    gets right, comparing moe-run with onnxruntime and torch (numerics only)."""
    for old in E2E_DIR.glob("custom-*.test"):
        old.unlink()
    for name, cls in DESIGNS.items():
        entries = [(e, r) for e, r in sorted(results.items())
                   if r.get("design") == name and r.get("ort_matches_torch")]
        if not entries:
            continue
        lines = [
            f"# Tests that the custom-track exports of {cls.__name__} (examples/zoo/custom,",
            f"# export_custom.py: {cls.__doc__.strip().splitlines()[0].rstrip('.')})",
            "# compile, and that moe-run matches onnxruntime on fresh random inputs and the",
            "# torch module's saved outputs at 1, 7 and 64 tokens (--torch-reference): every",
            "# export of this design that onnxruntime gets right (examples/zoo/custom/README.md).",
            "",
        ]
        for entry, record in entries:
            p = entry.upper()
            today = record.get("moec_today", {})
            lines.append(f"# {entry}: {record['exporter']} opset {record['opset']}, {record['code']} code.")
            if today.get("rc"):
                lines.append(f"# moec bug: moec compile fails on this export, which onnxruntime gets right: "
                             f"{today.get('error')}")
            if record.get("moec_bug"):
                lines.append(f"# moec bug: {record['moec_bug']}")
            lines.append(f"# RUN: %python %moec_src/test/lib/e2e.py %moec_src/{record['file']} --workdir %t/{entry} "
                         f"--tokens 1,7,64 --max-tokens 64 --torch-reference %moec_src/{record['reference']} "
                         f"| FileCheck %s --check-prefix={p}")
            lines.append(f"# {p}: ok torch-tokens=64 output {{{{.*}}}} vs torch: max abs error")
            lines.append(f"# {p}: e2e: {entry}.onnx matches onnxruntime")
            lines.append("")
        path = E2E_DIR / f"custom-{name.replace('_', '-')}.test"
        path.write_text("\n".join(lines))
        print(f"wrote {path.relative_to(REPO_ROOT)} ({len(entries)} exports)")


def short_remark(today: dict) -> str:
    line = today.get("error") or today.get("first_remark") or ""
    # "moec: remark: FILE: node 'X' (Op): text" -> "node 'X' (Op): text"
    return re.sub(r"^moec: (remark|error): [^:]*\.onnx: ", lambda m: "error: " if m.group(1) == "error" else "",
                  line).replace("|", "\\|")


def print_table(results: dict):
    """The README's results table (markdown) from the manifest."""
    print("| export | exporter | opset | code | ort = torch (1, 7, 64, 2x5) | moec today | first remark (or error) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in DESIGNS:
        for entry, r in sorted(results.items()):
            if r.get("design") != name:
                continue
            if "refusal" in r:
                print(f"| `{entry}` | {r['exporter']} | {r['opset_requested']} | {r['code']} | refused | — | "
                      f"{r['refusal'][:160].replace('|', '/')} |")
                continue
            checks = r["ort_vs_torch"]
            def cell(c):
                return "ok" if c["ok"] else ("error" if "error" in c else f"{c['max_abs']:.2g}")

            ort_cell = "yes" if r["ort_matches_torch"] else "**no**: " + ", ".join(
                f"{k}: {cell(c)}" for k, c in checks.items())
            today = r.get("moec_today", {})
            if today.get("rc"):
                layers = "fails"
            else:
                n = today.get("moe_layers", 0)
                layers = f"{n} ({today['form']})" if n else "0"
            print(f"| `{entry}` | {r['exporter']} | {r['opset']} | {r['code']} | {ort_cell} | {layers} | "
                  f"{short_remark(today)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="designs to export (default: all)")
    parser.add_argument("--moec-today", action="store_true", help="run moec on every export (no export)")
    parser.add_argument("--moec", default=str(REPO_ROOT / "build" / "bin" / "moec"))
    parser.add_argument("--write-tests", action="store_true", help="write test/E2E/custom-<design>.test")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--table", action="store_true", help="print the README's results table")
    args = parser.parse_args()
    if args.list:
        for name, cls in DESIGNS.items():
            print(f"{name}: {cls.__name__}: {cls.__doc__.splitlines()[0]}")
        return
    if not torch.__version__.startswith(TORCH_VERSION):
        sys.exit(f"export_custom: needs torch {TORCH_VERSION}, not {torch.__version__}")
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    results = manifest.setdefault("models", {})
    if args.table:
        print_table(results)
        return
    if args.moec_today:
        moec_today(results, Path(args.moec))
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        manifest["moec_today"] = {
            "command": "moec compile X.onnx -o plan.bin --max-tokens 64",
            "git_head": head,
            "binary_mtime": __import__("datetime").datetime.fromtimestamp(
                Path(args.moec).stat().st_mtime).isoformat(timespec="seconds")}
    elif not args.write_tests:
        for name in DESIGNS:
            if args.only and name not in args.only:
                continue
            for stale in [k for k, r in results.items() if r.get("design") == name]:
                del results[stale]
            for stale in OUT_DIR.glob(f"{name}_*"):
                stale.unlink()
            export_design(name, results)
    if args.write_tests:
        write_tests(results)
    manifest.update(version=1, generator="examples/zoo/custom/export_custom.py (see README.md)",
                    torch=torch.__version__.split("+")[0], onnx=onnx.__version__, onnxruntime=ort.__version__,
                    tokens=list(TOKENS), seed=SEED, tolerance=PARITY_TOLERANCE)
    manifest["models"] = dict(sorted(results.items()))
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
