"""The custom track's designs in the style of LLM code bases' own MoE
layers: Mistral's reference inference code, DeepSeek-V3's and DeepSeek-MoE's
inference code, Grok-1, OLMoE and JetMoE. Each takes hidden_states and
returns output of the same shape; `layout` is "bsh" ([batch, seq, H], both
dynamic) or "th" ([tokens, H]).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from design_parts import SwiGLU, init_weights


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
