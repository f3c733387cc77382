"""What the custom track's designs share: their weight init and the expert
networks several of them use.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def init_weights(module: nn.Module, seed: int) -> nn.Module:
    """Matrices (and stacked [E, ...] weights) from N(0, 0.25^2), vectors from
    N(0, 0.1^2): outputs of O(1), so that a parity check means something."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(module.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=gen) * (0.25 if p.dim() >= 2 else 0.1))
    return module.eval()



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
