"""What each Ethos-U target can run of the calls the TOSA walk lowers (ARM-ETHOSU.md §3, ExecuTorch's
`ethos_u55_support.py` with Vela 5.0's limits). Vela has no CPU fallback for TOSA input: one call it
cannot place fails the whole compile, so these checks turn such a call away before it is delegated.

U85 has none of U55's limits. A check returns the reason a call stays on the CPU, or None.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx import Node

from etbuild.backends.ethos_u.targets import family
from etbuild.backends.tosa.aot.patches import is_patch

aten = torch.ops.aten
U55_REJECTED = frozenset(
    getattr(aten, name) for name in (
        "eq", "ne", "ge", "gt", "le", "lt", "where", "logical_and", "logical_or", "logical_xor", "logical_not",
        "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "any", "gather", "index", "index_select",
        "index_put", "scatter", "scatter_add", "scatter_reduce", "select_scatter", "upsample_bilinear2d",
        "grid_sampler_2d",
    )
)
"""Operator packets U55 never runs (any overload)."""
POOLS = frozenset({aten.max_pool2d_with_indices.default, aten.max_pool2d.default, aten.avg_pool2d.default})


def check_for(target: str) -> Callable[[Node], str | None]:
    """The per-call check of one target."""
    if family(target).name == "u55":
        return lambda node: _u55(node, target)
    return lambda node: None


def _u55(node: Node, target: str) -> str | None:
    packet = getattr(node.target, "overloadpacket", None)
    if packet in U55_REJECTED:
        return f"{target} cannot run {packet.__name__} (Ethos-U55 has no such operation; Vela would fail)"
    if node.target is aten.convolution.default:
        return _u55_convolution(node, target)
    if node.target in POOLS:
        kernel = list(node.args[1])
        stride = list(node.args[2]) if len(node.args) > 2 and node.args[2] else kernel
        return _u55_pool(kernel, stride, target)
    if node.target is aten.mean.dim:
        shape = node.args[0].meta["val"].shape[2:]
        kernel = [shape[0], shape[1]] if len(shape) == 2 else [1, shape[0]]
        return _u55_pool(kernel, [1, 1], target)
    return None


def _u55_convolution(node: Node, target: str) -> str | None:
    if is_patch(node):
        return None  # lowered as a transpose and a 1x1 convolution (etbuild.backends.tosa.aot.patches)
    kernel = list(node.args[1].meta["val"].shape[2:])
    stride = list(node.args[3])
    if len(kernel) == 1:
        kernel, stride = [1, *kernel], [1, *stride]
    ky, kx = kernel
    if ky > 64 or kx * ky > 4096:
        return f"{target} convolutions take kernels up to 64 high and 4096 taps; this one is {ky}x{kx}"
    shape = node.args[0].meta["val"].shape
    degenerate = len(shape) == 3 or shape[2] == 1 or shape[3] == 1
    if stride not in ([1, 1], [2, 2]) and not (degenerate and stride in ([1, 2], [2, 1])):
        return f"{target} convolutions take strides (1,1) and (2,2); this one has {tuple(stride)}"
    return None


def _u55_pool(kernel: list[int], stride: list[int], target: str) -> str | None:
    ky, kx = kernel
    if ky > 256 or kx * ky > 65536:
        return f"{target} pools take windows up to 256 high and 65536 taps; this one is {ky}x{kx}"
    if any(s < 1 or s > 3 for s in stride):
        return f"{target} pools take strides 1 to 3; this one has {tuple(stride)}"
    return None
