"""Example models that recipes name as `etbuild.zoo:<callable>`.

Each is a plain factory returning an `nn.Module`; initialization draws from torch's global RNG,
which `etbuild.model.build_model` seeds with `model.seed` first. AOT side: imports torch.
"""

from collections.abc import Sequence
from itertools import pairwise

from torch import nn


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
