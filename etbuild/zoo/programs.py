"""Models that exercise program features: control flow (cond_model), mutable state (running_stats),
integer and bool outputs (embed_argmax, compare_where)."""

from __future__ import annotations

import torch
from torch import nn

# ---------------------------------------------------------------------------- cond_model


class CondModel(nn.Module):
    """`torch.cond` on a data-dependent predicate: `x.sum() > 0` picks one of two branches.

    The true branch is relu(a(x)), the false branch tanh(b(x)) * 2; both give a
    (batch, features) float tensor, which a shared linear layer then maps to the output.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.a, self.b, self.head = (
            nn.Linear(features, features),
            nn.Linear(features, features),
            nn.Linear(features, features),
        )

    def positive(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x))

    def negative(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.b(x)) * 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cond(x.sum() > 0, self.positive, self.negative, (x,)))


def cond_model(features: int = 16) -> nn.Module:
    """A model with data-dependent control flow: see `CondModel`."""
    return CondModel(features)


# ---------------------------------------------------------------------------- running_stats


class RunningStats(nn.Module):
    """Mutable state: each call counts itself and folds the batch mean into a running mean.

    Buffers: `count` (int64, shape (1,)), `mean` (float32, shape (features,)). A call does
    `count += 1; mean = 0.9 mean + 0.1 x.mean(0)` in place and returns `(x - mean, count)`, both
    read after the update, so the outputs of call n depend on calls 1..n.
    """

    count: torch.Tensor
    mean: torch.Tensor

    def __init__(self, features: int) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(1, dtype=torch.int64))
        self.register_buffer("mean", torch.zeros(features))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.count.add_(1)
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.mean, self.count.clone()


def running_stats(features: int = 16) -> nn.Module:
    """A stateful model (mutable buffers updated on every call): see `RunningStats`."""
    return RunningStats(features)


# ---------------------------------------------------------------------------- integer and bool outputs


class EmbedArgmax(nn.Module):
    """int64 token ids (batch, tokens) → Embedding → Linear → argmax: an int64 label per token."""

    def __init__(self, vocab: int, dim: int, num_classes: int) -> None:
        super().__init__()
        self.embed, self.classify = nn.Embedding(vocab, dim), nn.Linear(dim, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.argmax(self.classify(self.embed(tokens)), dim=-1)


def embed_argmax(vocab: int = 1000, dim: int = 64, num_classes: int = 17) -> nn.Module:
    """A per-token tagger with an integer output: see `EmbedArgmax`."""
    return EmbedArgmax(vocab, dim, num_classes)


class CompareWhere(nn.Module):
    """Comparisons, logical ops and `torch.where` over two float inputs and an int64 one.

    forward(a, b, k) with a, b float and k int64 of one shape returns
    `(where(mask, a, 2b), mask, mask.sum(-1))`: float, bool and int64 outputs, where
    `mask = (a > b and not |a - b| < 0.5) or (k >= 5 and a != 0)`. It has no parameters.
    """

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        close = torch.abs(a - b) < 0.5
        clear_win = torch.logical_and(a > b, torch.logical_not(close))
        mask = torch.logical_or(clear_win, torch.logical_and(k >= 5, a != 0))
        return torch.where(mask, a, b * 2.0), mask, mask.sum(-1)


def compare_where() -> nn.Module:
    """A parameter-free model of comparisons and selections: see `CompareWhere`."""
    return CompareWhere()
