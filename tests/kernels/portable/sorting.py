"""Conformance specs of the etbuild.kernels.portable.sorting kernels: their cases against torch."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


def distinct_values(g: Gen, shape: tuple[int, ...]) -> torch.Tensor:
    """Values without ties (sorting order is then unique)."""
    n = math.prod(shape)
    if g.is_float:
        return g.t(shape)
    start = 0 if g.dtype == torch.uint8 else -(n // 2)
    return (torch.randperm(n, generator=g.g) + start).to(g.dtype).reshape(shape)


def sort_cases(g: Gen, stable: bool) -> Iterator[Case]:
    lead = (None,) if stable else ()
    for dim, descending in ((1, False), (0, True), (-1, True)):
        yield Case((distinct_values(g, (3, 5)), *lead, dim, descending))
    yield Case((distinct_values(g, (4, 3)).t(), *lead, 1, False))
    yield Case((g.t(()), *lead, 0, False))
    if g.is_float:
        yield Case((g.special(), *lead, 0, True))


def topk_cases(g: Gen) -> Iterator[Case]:
    yield Case((distinct_values(g, (3, 5)), 2, 1, True, True))
    yield Case((distinct_values(g, (3, 5)), 3, 0, False, True))
    yield Case((distinct_values(g, (4, 3)).t(), 1, -1, True, True))
    yield Case((distinct_values(g, (3, 5)), 0, 1, True, True))


SPECS.add("aten::sort.values", lambda g: sort_cases(g, False))
SPECS.add("aten::sort.values_stable", lambda g: sort_cases(g, True))
SPECS.add("aten::topk.values", topk_cases)
