"""Conformance specs of the etbuild.kernels.portable.linalg kernels: their cases against torch."""

from __future__ import annotations

import math
from collections.abc import Iterator

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


def mm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((4, 5))))
    yield Case((g.t((3, 4), layout="t"), g.t((4, 5), layout="t")))
    yield Case((g.t((0, 4)), g.t((4, 3))))
    yield Case((g.t((3, 0)), g.t((0, 2))))
    yield Case((g.t((1, 1)), g.t((1, 1))))


def bmm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), g.t((2, 4, 5))))
    yield Case((g.t((2, 3, 4), layout="t"), g.t((2, 4, 5), layout="s")))
    yield Case((g.t((0, 3, 4)), g.t((0, 4, 5))))


def addmm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((5,)), g.t((3, 4)), g.t((4, 5)), 1, 1))
    yield Case((g.t((3, 5)), g.t((3, 4), layout="t"), g.t((4, 5)), 0.5, 2))
    yield Case((g.special()[:5], g.t((3, 4)), g.t((4, 5)), 0, 1))
    yield Case((g.t(()), g.t((0, 4)), g.t((4, 5)), 1, 1))


def baddbmm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 5)), g.t((2, 3, 4)), g.t((2, 4, 5)), 1, 1))
    yield Case((g.t((5,)), g.t((2, 3, 4), layout="t"), g.t((2, 4, 5)), 0.5, -1))
    yield Case((g.t((2, 3, 5)), g.t((2, 3, 4)), g.t((2, 4, 5)), 0, 2))


def linear_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), g.t((5, 4)), g.t((5,))))
    yield Case((g.t((3, 4), layout="t"), g.t((5, 4)), None))
    yield Case((g.t((4,)), g.t((5, 4), layout="t"), g.t((5,))))
    yield Case((g.t((0, 4)), g.t((5, 4)), g.t((5,))))


def cdist_cases(g: Gen) -> Iterator[Case]:
    for p in (2.0, 1.0, 0.0, math.inf, 3.0):
        yield Case((g.t((2, 4, 3)), g.t((2, 5, 3)), p, None))
    yield Case((g.t((4, 3), layout="t"), g.t((0, 3)), 2.0, None))


SPECS.add("aten::mm.out", mm_cases, tol=4)
SPECS.add("aten::bmm.out", bmm_cases, tol=4)
SPECS.add("aten::addmm.out", addmm_cases, tol=4)
SPECS.add("aten::baddbmm.out", baddbmm_cases, tol=4)
SPECS.add("aten::linear.out", linear_cases, tol=4)
SPECS.add(
    "aten::mv.out",
    lambda g: [Case((g.t((3, 4)), g.t((4,)))), Case((g.t((3, 4), layout="t"), g.t((4,), layout="s")))],
    tol=4,
)
SPECS.add("aten::dot.out", lambda g: [Case((g.t((5,)), g.t((5,)))), Case((g.t((0,)), g.t((0,))))], tol=4)
SPECS.add("aten::_cdist_forward.out", cdist_cases, tol=10)
SPECS.add(
    "aten::_pdist_forward.out",
    lambda g: [Case((g.t((5, 3)), p)) for p in (2.0, 1.0, math.inf)] + [Case((g.t((1, 3)), 2.0))],
    tol=10,
)
