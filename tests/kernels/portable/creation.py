"""Conformance specs of the etbuild.kernels.portable.creation kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tests.kernels.conformance import UNARY_SHAPES, Case, Gen, SpecTable

SPECS = SpecTable()


def scalar_value(g: Gen) -> bool | int | float:
    return True if g.is_bool else (2.5 if g.is_float else 3)


def arange_cases(g: Gen) -> Iterator[Case]:
    out = (g.dtype,)
    yield Case((0, 10, 1), out)
    yield Case((1, 7, 2), out)
    if g.dtype != torch.uint8:
        yield Case((-3, 3, 1), out)
        yield Case((10, 0, -3), out)
    if g.is_float:
        yield Case((0.5, 3.2, 0.3), out)


SPECS.add("aten::arange.start_out", arange_cases)
SPECS.add("aten::arange.out", lambda g: [Case((e,), (g.dtype,)) for e in ([5, 0, 3.5] if g.is_float else [5, 0])])
SPECS.add("aten::full.out", lambda g: [Case((s, scalar_value(g)), (g.dtype,)) for s in ([2, 3], [], [0, 2])])
SPECS.add(["aten::zeros.out", "aten::ones.out"], lambda g: [Case((s,), (g.dtype,)) for s in ([2, 3], [], [0, 2])])
SPECS.add(
    "aten::full_like.out",
    lambda g: [Case((g.t(s, layout=lay), scalar_value(g), None), (g.dtype,)) for s, lay in UNARY_SHAPES[:6]],
)
SPECS.add(
    ["aten::zeros_like.out", "aten::ones_like.out"],
    lambda g: [Case((g.t(s, layout=lay), None), (g.dtype,)) for s, lay in UNARY_SHAPES[:6]],
)
SPECS.add("aten::scalar_tensor.out", lambda g: [Case((v,), (g.dtype,)) for v in (scalar_value(g), 0, True)])
SPECS.add("aten::empty.out", lambda g: [Case(([2, 3], None), (g.dtype,)), Case(([0], None), (g.dtype,))], values=False)
SPECS.add(
    "dim_order_ops::_empty_dim_order.out",
    lambda g: [Case(([2, 3], None), (g.dtype,)), Case(([2, 3, 4, 5], [0, 2, 3, 1]), (g.dtype,))],
    ref=lambda c: torch.empty(c.args[0], dtype=c.out_dtypes[0]),
    outs="tensor",
    values=False,
)
SPECS.add(
    "aten::fill.Scalar_out", lambda g: [Case((g.t(s, layout=lay), scalar_value(g))) for s, lay in UNARY_SHAPES[:6]]
)
SPECS.add("aten::fill.Tensor_out", lambda g: [Case((g.t(s, layout=lay), g.t(()))) for s, lay in UNARY_SHAPES[:6]])
