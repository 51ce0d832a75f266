"""The PyTorch models and optimizers of ``prague-bench``'s workloads (``workload.WORKLOADS``).

Each model carries a synthetic parameter of ``params`` floats, averaged with it, so that
communication has a realistic size; the step adds it to the loss with weight 0.

    >>> model, opt = build("lm", params=8, lr=1e-3)
    >>> model(torch.zeros(2, 64, dtype=torch.long)).shape, type(opt).__name__
    (torch.Size([2, 64, 256]), 'AdamW')
    >>> [round(lr_schedule("lm", opt, 100).lr_lambda(s), 2) for s in (0, 9, 10, 55, 100)]
    [0.1, 1.0, 1.0, 0.55, 0.1]
"""

from __future__ import annotations

import math

import torch
from torch import nn

from horovod_prague.bench.trainer import CONV_LAYERS

from .datasets import CONTEXT


def cnn() -> nn.Module:
    layers: list[nn.Module] = [nn.Unflatten(1, (1, 40))]
    channels, length = 1, 40
    for out, kernel in CONV_LAYERS:
        layers += [nn.Conv1d(channels, out, kernel, stride=2, padding=kernel // 2), nn.ReLU()]
        channels, length = out, (length + 1) // 2
    layers += [nn.Flatten(), nn.Linear(channels * length, 10)]
    return nn.Sequential(*layers)


def bn_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 4))


class TinyLM(nn.Module):
    """A causal transformer over bytes: 2 pre-norm layers of width 64, 4 heads."""

    def __init__(self, width: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, width)
        self.position = nn.Parameter(torch.zeros(CONTEXT, width))
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)
        self.register_buffer(
            "causal", nn.Transformer.generate_square_subsequent_mask(CONTEXT), persistent=False
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        h = self.embed(tokens) + self.position[:length]
        h = self.body(h, mask=self.causal[:length, :length], is_causal=True)
        return self.head(self.norm(h))


class WarmupCosine(torch.optim.lr_scheduler.LambdaLR):
    """Linear warm-up over the first tenth of ``steps``, then a cosine down to a tenth."""

    def __init__(self, optimizer: torch.optim.Optimizer, steps: int) -> None:
        self.warmup = max(1, steps // 10)
        self.steps = steps
        super().__init__(optimizer, self.lr_lambda)

    def lr_lambda(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        done = min(1.0, (step - self.warmup) / max(1, self.steps - self.warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))


def build(workload: str, params: int, lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The workload's model, with its synthetic parameter, and optimizer."""
    model = {"mnist1d": cnn, "bn-mlp": bn_mlp, "lm": TinyLM}[workload]()
    model.register_parameter("communicated", nn.Parameter(torch.zeros(params)))
    if workload != "lm":
        return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return model, torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)


def lr_schedule(workload: str, optimizer: torch.optim.Optimizer, steps: int) -> WarmupCosine | None:
    """The workload's learning-rate schedule over a rank's ``steps`` (none: a constant LR)."""
    return WarmupCosine(optimizer, steps) if workload == "lm" else None
