"""Conformance specs of the etbuild.kernels.portable.index kernels: their cases against torch."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from tests.kernels.conformance import UNARY_SHAPES, Case, Gen, SpecTable, pairs

SPECS = SpecTable()


def distinct(g: Gen, n: int, k: int, count: int, dim: int) -> torch.Tensor:
    """`count` index tensors of k distinct positions in [0, n) along dim of a 2-d shape."""
    shape = (n, count) if dim == 0 else (count, n)
    return torch.argsort(torch.rand(shape, generator=g.g), dim=dim).narrow(dim, 0, k)


def gather_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), 1, g.index((3, 2), 4), False))
    yield Case((g.t((3, 4)), 0, g.index((2, 4), 3), False))
    yield Case((g.t((3, 4), layout="t"), 1, g.index((2, 2), 4), False))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), -1, g.index((2, 3, 4, 2), 5), False))
    yield Case((g.t(()), 0, g.index((), 1), False))


def index_cases(g: Gen) -> Iterator[Case]:
    x = g.t((3, 4, 5))
    yield Case((x, [g.index((2,), 3)]))
    yield Case((x, [None, g.index((3,), 4) - 2]))
    yield Case((x, [g.index((2,), 3), None, g.index((2,), 5, torch.int32)]))
    yield Case((x, [g.t((3, 4), torch.bool)]))
    yield Case((g.t((3, 4), layout="t"), [g.index((2, 2), 3), g.index((2,), 4)]))
    yield Case((x, [None, None, g.index((0,), 5)]))


def index_select_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), 0, g.index((5,), 3)))
    yield Case((g.t((3, 4), layout="t"), 1, g.index((2,), 4, torch.int32)))
    yield Case((g.t(()), 0, g.index((1,), 1)))
    yield Case((g.t((3, 4)), 1, g.index((0,), 4)))


def embedding_cases(g: Gen) -> Iterator[Case]:
    w = g.t((10, 4))
    yield Case((w, g.index((2, 3), 10), -1, False, False))
    yield Case((w, g.index((), 10), 0, False, False))
    yield Case((g.t((10, 4), layout="t"), g.index((5,), 10, torch.int32), -1, False, False))


def where_cases(g: Gen) -> Iterator[Case]:
    for a, b in pairs(g):
        yield Case((g.t(torch.broadcast_shapes(a.shape, b.shape)[-1:], torch.bool), a, b))
    yield Case((g.t((3, 1), torch.bool), g.t(()), g.t((4,))))


def scatter_cases(g: Gen, value: bool) -> Iterator[Case]:
    extra: Any = (2 if not g.is_float else 2.5) if not g.is_bool else True
    for dim, idx in ((0, distinct(g, 3, 2, 5, 0)), (1, distinct(g, 5, 2, 3, 1))):
        yield Case((g.t((3, 5)), dim, idx, extra if value else g.t((3, 5))))
    yield Case((g.t((3, 5), layout="t"), 1, distinct(g, 5, 5, 2, 1), extra if value else g.t((3, 5))))
    yield Case((g.t(()), 0, g.index((), 1), extra if value else g.t(())))


def scatter_add_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 5)), 0, g.index((4, 5), 3), g.t((4, 5))))
    yield Case((g.t((3, 5), layout="t"), 1, g.index((2, 7), 5), g.t((3, 8))))


def index_put_cases(g: Gen) -> Iterator[Case]:
    x = g.t((5, 4))
    yield Case((x, [distinct(g, 5, 3, 1, 0)[:, 0]], g.t((3, 4)), False))
    yield Case((x, [distinct(g, 5, 2, 1, 0)[:, 0]], g.t((4,)), False))
    yield Case((x, [None, distinct(g, 4, 2, 1, 0)[:, 0]], g.t((5, 2)), False))
    yield Case((g.t((5, 4), layout="t"), [g.t((5,), torch.bool)], g.t((4,)), False))
    if not g.is_bool:
        yield Case((x, [g.index((6,), 5)], g.t((6, 4)), True))


def masked_fill_cases(g: Gen) -> Iterator[Case]:
    value = True if g.is_bool else (-1.5 if g.is_float else 7)
    yield Case((g.t((3, 4)), g.t((3, 4), torch.bool), value))
    yield Case((g.t((3, 4), layout="t"), g.t((4,), torch.bool), value))
    yield Case((g.t(()), g.t((), torch.bool), value))
    if g.is_float:
        yield Case((g.t((3, 4)), g.t((3, 4), torch.bool), math.inf))


def nonzero_cases(g: Gen) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES:
        x = g.t(shape, layout=layout)
        yield Case((x * g.t(shape, torch.bool).to(x.dtype),))


def masked_select_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((3, 4), torch.bool)))
    yield Case((g.t((3, 4), layout="t"), g.t((4,), torch.bool)))
    yield Case((g.t((4,)), g.t((3, 1), torch.bool)))
    yield Case((g.t(()), g.t((), torch.bool)))


def masked_scatter_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((3, 4), torch.bool), g.t((12,))))
    yield Case((g.t((3, 4), layout="t"), g.t((4,), torch.bool), g.t((4, 5))))


SPECS.add("aten::gather.out", gather_cases)
SPECS.add("aten::index.Tensor_out", index_cases)
SPECS.add("aten::index_select.out", index_select_cases)
SPECS.add("aten::embedding.out", embedding_cases)
SPECS.add("aten::where.self_out", where_cases)
SPECS.add("aten::scatter.src_out", lambda g: scatter_cases(g, False))
SPECS.add("aten::scatter.value_out", lambda g: scatter_cases(g, True))
SPECS.add("aten::scatter_add.out", scatter_add_cases, tol=4)
SPECS.add("aten::index_put.out", index_put_cases, tol=4)
SPECS.add("aten::masked_fill.Scalar_out", masked_fill_cases)
SPECS.add(
    "aten::select_scatter.out",
    lambda g: [Case((g.t((3, 4)), g.t((4,)), 0, 1)), Case((g.t((3, 4), layout="t"), g.t((3,)), 1, -1))],
)
SPECS.add(
    "aten::slice_scatter.out",
    lambda g: [
        Case((g.t((5, 4)), g.t((2, 4)), 0, 1, 3, 1)),
        Case((g.t((5, 4), layout="t"), g.t((5, 2)), 1, 0, 4, 2)),
        Case((g.t((5, 4)), g.t((5, 4)), 0, None, None, 1)),
    ],
)
SPECS.add("aten::nonzero.out", nonzero_cases)
SPECS.add("aten::index_put_", index_put_cases, mutates=(0,))
SPECS.add("aten::masked_select.out", masked_select_cases)
SPECS.add("aten::masked_scatter.out", masked_scatter_cases)
SPECS.add(
    "aten::repeat_interleave.Tensor_out",
    lambda g: [Case((g.t((4,), low=0, high=4), None)), Case((g.t((0,)), None)), Case((g.t((3,), low=0, high=3), 4))],
    ref=lambda c: torch.repeat_interleave(c.args[0]),
    outs="tensor",
)
