"""Conformance specs of the etbuild.kernels.portable.reduction kernels: their cases against torch."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

import torch

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


REDUCE_INPUTS = [((3, 4), "c"), ((2, 3, 4), "t"), ((2, 3, 4, 5), "cl"), ((0, 3), "c")]


def reduce_cases(g: Gen, dims: Sequence[Any], *extra: Any, empty: bool = True) -> Iterator[Case]:
    for (shape, layout), dim in zip(REDUCE_INPUTS if empty else REDUCE_INPUTS[:3], dims):
        for keepdim in (False, True):
            yield Case((g.t(shape, layout=layout), dim, keepdim, *extra))


def sum_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [[1], [0, 2], [-1, 1], [1]], None)
    yield Case((g.t((3, 4)), None, False, None))
    yield Case((g.t((3, 4)), [], True, None))
    yield Case((g.t(()), [0], False, None))
    yield Case((g.t((3, 4)), [0], False, torch.float64 if g.is_float else torch.int32))


def mean_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [[1], [0, 2], [-1, 1], [1]], None)
    yield Case((g.t((3, 4)), None, False, None))
    yield Case((g.t((3, 4)), [1], False, torch.float64))


def amax_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [[1], [0, 2], [-1, 1]], empty=False)
    yield Case((g.t((3, 4)), [], False))
    yield Case((g.t(()), [0], True))
    yield Case((g.t((0, 3)), [1], False))


def arg_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [1, 0, -1], empty=False)
    yield Case((g.t((3, 4)), None, False))
    yield Case((g.t((3, 4)), None, True))
    yield Case((g.t(()), None, False))
    yield Case((g.t(()), 0, True))


def dim_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [1, 0, -1], empty=False)
    yield Case((g.t(()), 0, False))
    yield Case((g.t((0, 3)), 1, True))


def var_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), [1], None, False))
    yield Case((g.t((2, 3, 4), layout="t"), None, 0, True))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [0, 2], 2, False))
    yield Case((g.t((3, 2)), [1], 0.5, True))


def any_cases(g: Gen, dims: bool) -> Iterator[Case]:
    sparse = g.t((3, 4)) * (g.t((3, 4), torch.bool) & g.t((3, 4), torch.bool)).to(g.dtype)
    if dims:
        yield from reduce_cases(g, [[1], [0, 2], [-1, 1], [1]])
        yield Case((sparse, None, False))
        yield Case((sparse, [], False))
    else:
        yield from reduce_cases(g, [1, 0, -1, 1])
        yield Case((sparse, 1, False))


def scan_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), 1, None))
    yield Case((g.t((2, 3, 4), layout="t"), 0, None))
    yield Case((g.t(()), 0, None))
    yield Case((g.t((0, 3)), 1, None))
    yield Case((g.t((3, 4)), -1, torch.float64 if g.is_float else torch.int32))


def logsumexp_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [[1], [0, 2], [-1, 1], [1]])
    if g.is_float:
        yield Case((torch.stack([g.special(), torch.full((14,), -math.inf, dtype=g.dtype)]), [1], False))


def norm_cases(g: Gen) -> Iterator[Case]:
    x = g.t((3, 4))
    for ord, dim, keepdim in [
        (2, None, False),
        (1, [1], True),
        (math.inf, [0], False),
        (0, None, False),
        (3, [1], False),
        (-math.inf, [1], True),
    ]:
        yield Case((x, ord, dim, keepdim, None))
    yield Case((g.t((2, 3, 4), layout="t"), 2, [0, 2], False, None))
    yield Case((g.t((0, 3)), 2, [0], False, None))


SPECS.add("aten::sum.IntList_out", sum_cases, tol=4)
SPECS.add(
    "aten::sum.out",
    lambda g: [Case((g.t((3, 4)), None)), Case((g.t((2, 3, 4), layout="t"), None)), Case((g.t((0,)), None))],
    tol=4,
)
SPECS.add("aten::mean.out", mean_cases, tol=4)
SPECS.add(
    "aten::prod.int_out",
    lambda g: chain(reduce_cases(g, [1, 0, -1, 1], None), [Case((g.t(()), 0, False, None))]),
    tol=4,
)
SPECS.add(
    "aten::prod.out",
    lambda g: [
        Case((g.t((3, 4)), None)),
        Case((g.t((0,)), None)),
        Case((g.t((2, 3)), torch.float64 if g.is_float else torch.int16)),
    ],
    tol=4,
)
SPECS.add(["aten::amax.out", "aten::amin.out"], amax_cases)
SPECS.add(
    ["aten::max.unary_out", "aten::min.unary_out"],
    lambda g: [Case((g.t(s, layout=lay),)) for s, lay in REDUCE_INPUTS[:3]] + [Case((g.t(()),))],
)
SPECS.add(["aten::argmax.out", "aten::argmin.out"], arg_cases)
SPECS.add(["aten::max.dim_max", "aten::min.dim_min"], dim_cases)
SPECS.add(["aten::var.correction_out", "aten::std.correction_out", "aten::var_mean.correction_out"], var_cases, tol=10)
SPECS.add(["aten::any.out", "aten::all.out"], lambda g: any_cases(g, False))
SPECS.add(["aten::any.dims_out", "aten::all.dims_out"], lambda g: any_cases(g, True))
SPECS.add(
    ["aten::any.all_out", "aten::all.all_out"],
    lambda g: [Case((g.t(s, layout=lay),)) for s, lay in REDUCE_INPUTS] + [Case((g.t(()),))],
)
SPECS.add(["aten::cumsum.out", "aten::cumprod.out"], scan_cases, tol=4)
SPECS.add("aten::logsumexp.out", logsumexp_cases, tol=4)
SPECS.add("aten::linalg_vector_norm.out", norm_cases, tol=4)
SPECS.add(
    "aten::mean.dtype_out", lambda g: [Case((g.t((3, 4), layout="t"), None)), Case((g.t((2, 3)), torch.float64))], tol=4
)
SPECS.add(
    "aten::var.out",
    lambda g: [Case((g.t((3, 4)), [1], True, False)), Case((g.t((2, 3, 4), layout="t"), None, False, True))],
    tol=10,
)
