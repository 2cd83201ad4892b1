"""Initialisation helpers the zoo's vision models share: non-trivial batch norms, He-initialised
convolutions, MobileNet's channel rounding."""

from __future__ import annotations

import torch
from torch import nn

# ---------------------------------------------------------------------------- helpers


def randomize_norms(module: nn.Module) -> None:
    """Give every batch norm non-trivial affine parameters and running statistics.

    Freshly built, an eval-mode BatchNorm is y = x / sqrt(1 + eps): a kernel that ignored its
    mean, variance, weight or bias would still verify. Random "trained-looking" values make
    each of the five inputs count. Draws from torch's global RNG (seeded by build_model).
    """
    kinds = nn.BatchNorm1d | nn.BatchNorm2d | nn.BatchNorm3d
    norms = [m for m in module.modules() if isinstance(m, kinds)]
    with torch.no_grad():
        for norm in norms:
            if norm.affine:
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.normal_(0.0, 0.1)
            if norm.running_mean is not None and norm.running_var is not None:
                norm.running_mean.normal_(0.0, 0.1)
                norm.running_var.uniform_(0.5, 1.5)


def init_convs_he(module: nn.Module) -> None:
    """He-normal (fan-in) initialization of every convolution, biases zero.

    PyTorch's default (uniform, gain 1/sqrt(3)) shrinks activations layer by layer, and
    torchvision's fan-out variant shrinks depthwise layers (their fan-out counts every channel):
    in eval mode, with no batch statistics to renormalize, `mobilenet_v2`'s logits would be
    about 1e-2 and an absolute tolerance of 1e-4 would hide a wrong kernel. Fan-in keeps
    activations of order one (and ReLU6 does clip).
    """
    for conv in module.modules():
        if isinstance(conv, nn.Conv1d | nn.Conv2d):
            nn.init.kaiming_normal_(conv.weight, mode="fan_in", nonlinearity="relu")
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)


def make_divisible(channels: float, divisor: int = 8) -> int:
    """MobileNet's channel rounding: the nearest multiple of `divisor`, never 10% below."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded
