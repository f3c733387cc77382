"""The custom track's designs in the style of training frameworks and
research code: Megatron-Core's permuting dispatcher, DeepSpeed/GShard and
Switch/t5x with capacity, Tutel/fairseq's dense mask, gathered expert
weights, V-MoE and makeMoE. Each takes hidden_states and returns output of
the same shape; `layout` is "bsh" ([batch, seq, H], both dynamic) or "th"
([tokens, H]).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from design_parts import ReluFFN


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
