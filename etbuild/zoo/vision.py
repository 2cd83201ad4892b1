"""Feed-forward and convolutional models: mlp, mobilenet_v2, kws_cnn."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import torch
from torch import nn

from etbuild.zoo.layers import init_convs_he, make_divisible, randomize_norms

# ---------------------------------------------------------------------------- mlp


def mlp(sizes: Sequence[int] = (784, 512, 256, 10)) -> nn.Module:
    """A multilayer perceptron: `Linear(sizes[i], sizes[i + 1])` layers, ReLU between them.

    There is no ReLU after the last layer: it returns logits.
    """
    if len(sizes) < 2:
        raise ValueError(f"mlp needs at least two sizes (inputs and outputs); got {list(sizes)}")
    layers: list[nn.Module] = []
    for n_in, n_out in pairwise(sizes):
        if layers:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


# ---------------------------------------------------------------------------- mobilenet_v2


def _conv_bn_relu6(
    n_in: int, n_out: int, kernel: int = 3, stride: int = 1, groups: int = 1
) -> nn.Sequential:
    """Conv2d (no bias) → BatchNorm2d → ReLU6, padded to keep the size at stride 1."""
    return nn.Sequential(
        nn.Conv2d(n_in, n_out, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(n_out),
        nn.ReLU6(),
    )


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1×1 expand, 3×3 depthwise, 1×1 linear projection, and a residual
    connection when the block keeps both the size (stride 1) and the channel count."""

    def __init__(self, n_in: int, n_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = n_in * expand
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn_relu6(n_in, hidden, kernel=1)]
        layers += [
            _conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, n_out, 1, bias=False),
            nn.BatchNorm2d(n_out),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and n_in == n_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


_MOBILENET_V2_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
"""(expansion, channels, blocks, first stride) per stage, from the MobileNetV2 paper."""


def mobilenet_v2(width: float = 0.5, num_classes: int = 1000) -> nn.Module:
    """A MobileNetV2 image classifier (inverted residuals, depthwise convolutions, ReLU6).

    `width` scales every channel count (rounded to multiples of 8); the last 1×1 convolution
    keeps 1280 channels below width 1, as in the paper. Global average pooling, then a linear
    classifier. Sized for 96×96 RGB inputs (any size divisible by 32 works). Convolutions are
    He-initialized and BatchNorm statistics randomized (see `init_convs_he`, `randomize_norms`).
    """
    n_in = make_divisible(32 * width)
    layers: list[nn.Module] = [_conv_bn_relu6(3, n_in, stride=2)]
    for expand, channels, blocks, stride in _MOBILENET_V2_STAGES:
        n_out = make_divisible(channels * width)
        for block in range(blocks):
            layers.append(InvertedResidual(n_in, n_out, stride if block == 0 else 1, expand))
            n_in = n_out
    last = make_divisible(1280 * max(1.0, width))
    layers.append(_conv_bn_relu6(n_in, last, kernel=1))
    model = nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(last, num_classes)
    )
    init_convs_he(model)
    randomize_norms(model)
    return model


# ---------------------------------------------------------------------------- kws_cnn


def kws_cnn(
    features: int = 40, channels: Sequence[int] = (64, 64, 64), num_classes: int = 12
) -> nn.Module:
    """A keyword-spotting 1-D CNN over audio features (batch, features, frames).

    Per entry of `channels`: Conv1d (kernel 3, same padding) → BatchNorm1d → ReLU →
    MaxPool1d(2); then the mean over the remaining frames and a linear classifier giving
    `num_classes` logits (e.g. ten keywords, "silence" and "unknown"). Convolutions are
    He-initialized and BatchNorm statistics randomized (see `init_convs_he`, `randomize_norms`).
    """
    layers: list[nn.Module] = []
    n_in = features
    for n_out in channels:
        layers += [
            nn.Conv1d(n_in, n_out, 3, padding=1),
            nn.BatchNorm1d(n_out),
            nn.ReLU(),
            nn.MaxPool1d(2),
        ]
        n_in = n_out
    model = nn.Sequential(
        *layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(n_in, num_classes)
    )
    init_convs_he(model)
    randomize_norms(model)
    return model
