"""Conformance specs of the etbuild.kernels.portable.copy kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from tests.kernels.conformance import UNARY_SHAPES, Case, Gen, SpecTable, unary

SPECS = SpecTable()


def cast_targets(g: Gen) -> list[torch.dtype]:
    """Target dtypes every value of the generated inputs converts to without UB."""
    targets = [torch.float32, torch.float64, torch.float16, torch.int8, torch.int32, torch.int64, torch.bool]
    return targets + [torch.uint8] if g.dtype in (torch.uint8, torch.bool) else targets


def to_copy_cases(g: Gen, memory_format: bool) -> Iterator[Case]:
    x = g.t((3, 4), layout="t")
    for target in cast_targets(g):
        yield Case((x, False, None), (target,))
    yield Case((g.t(()), False, None), (g.dtype,))
    fmt: Any = torch.channels_last if memory_format else [0, 2, 3, 1]
    yield Case((g.t((2, 3, 4, 5)), False, fmt), (torch.float32,))


def copy_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((3, 4), layout="t"), False))
    yield Case((g.t((3, 4)), g.t((4,)), False))
    yield Case((g.t((3, 4)), g.t((3, 4), torch.float32 if not g.is_float else torch.float64), False))
    yield Case((g.t(()), g.t(()), False))


def copy_out_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((3, 4), layout="t"), False))
    yield Case((g.t((3, 4)), g.t((4,), torch.float32 if not g.is_float else torch.int32), False))
    yield Case((g.t(()), g.t(()), False))


SPECS.add(
    "dim_order_ops::_to_dim_order_copy.out",
    lambda g: to_copy_cases(g, False),
    ref=lambda c: c.args[0].to(c.out_dtypes[0]),
    outs="tensor",
)
SPECS.add(
    "dim_order_ops::_clone_dim_order.out",
    lambda g: (
        [Case((g.t(s, layout=lay), False, None)) for s, lay in UNARY_SHAPES]
        + [Case((g.t((2, 3, 4, 5)), False, [0, 2, 3, 1]))]
    ),
    ref=lambda c: c.args[0].clone(),
    outs="tensor",
)
SPECS.add("aten::_to_copy.out", lambda g: to_copy_cases(g, True))
SPECS.add("aten::copy_", copy_cases, mutates=(0,))
SPECS.add("aten::copy.out", copy_out_cases)
SPECS.add(["aten::detach_copy.out", "aten::lift_fresh_copy.out"], unary)
SPECS.add(["et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out"], unary, ref=lambda c: c.args[0].clone(), outs="tensor")
