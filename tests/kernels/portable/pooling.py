"""Conformance specs of the etbuild.kernels.portable.pooling kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


def avg_pool2d_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 7, 6))
    yield Case((x, [3, 3], [2, 2], [1, 1], False, True, None))
    yield Case((x, [3, 3], [2, 2], [1, 1], True, True, None))
    yield Case((x, [3, 2], [2, 1], [1, 0], True, False, None))
    yield Case((g.t((2, 3, 7, 6), layout="cl"), [2, 2], [], [0, 0], False, True, 3))
    yield Case((g.t((3, 5, 5)), [2], [], [0], False, True, None))


def avg_pool1d_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 9))
    yield Case((x, [3], [2], [1], False, True))
    yield Case((x, [3], [2], [1], True, False))
    yield Case((g.t((3, 8), layout="t"), [2], [], [0], False, True))


def max_pool_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 7, 6))
    yield Case((x, [3, 3], [2, 2], [1, 1], [1, 1], False))
    yield Case((x, [3, 3], [2, 2], [1, 1], [1, 1], True))
    yield Case((g.t((2, 3, 9, 8), layout="cl"), [2, 3], [1, 2], [1, 1], [2, 2], False))
    yield Case((g.t((3, 5, 5)), [2, 2], [], [0, 0], [1, 1], True))
    yield Case((g.t((2, 4, 1, 9)), [1, 3], [1, 2], [0, 0], [1, 1], False))  # unpadded: the load-time fast path
    yield Case((g.t((1, 2, 6, 6)), [2, 2], [2, 2], [0, 0], [1, 1], False))
    yield Case((g.t((1, 2, 7, 7)), [3, 3], [2, 2], [0, 0], [2, 2], False))


def adaptive_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 7, 6))
    for size in ([1, 1], [3, 2], [7, 6], [4, 5]):
        yield Case((x, size))
    yield Case((g.t((3, 5, 5), layout="t"), [2, 3]))


SPECS.add("aten::avg_pool2d.out", avg_pool2d_cases, tol=4)
SPECS.add("aten::avg_pool1d.out", avg_pool1d_cases, tol=4)
SPECS.add("aten::max_pool2d_with_indices.out", max_pool_cases)
SPECS.add(["aten::adaptive_avg_pool2d.out", "aten::_adaptive_avg_pool2d.out"], adaptive_cases, tol=4)
