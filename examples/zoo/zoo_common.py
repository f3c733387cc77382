"""What the zoo's model builders share: the tracks (one pinned transformers
release and venv each), the manifest's records (Gate, Model), the builder
registry (@model) and the building blocks (seeded init, wrappers, gate
ground truth). export_zoo.py exports what the builders of zoo_mixtral.py and
zoo_families.py register.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import onnx
import torch
import transformers


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
