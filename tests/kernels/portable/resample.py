"""Conformance specs of the etbuild.kernels.portable.resample kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


def upsample_cases(g: Gen, vec: bool, bilinear: bool) -> Iterator[Case]:
    x = g.t((2, 3, 4, 5))
    xc = g.t((1, 2, 3, 3), layout="cl")
    corners = (False, True) if bilinear else (None,)
    for ac in corners:
        mid = (ac,) if bilinear else ()
        if vec:
            yield Case((x, [8, 10], *mid, None))
            yield Case((x, [6, 3], *mid, None))
            yield Case((xc, None, *mid, [2.0, 1.5]))
            yield Case((x, None, *mid, [0.5, 2.0]))
        else:
            yield Case((x, [8, 10], *mid, None, None))
            yield Case((xc, [7, 5], *mid, None, None))
            yield Case((x, [6, 7], *mid, 1.5, 1.4))


def grid_sampler_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 5, 4))
    grid = g.t((2, 3, 6, 2), low=-1.2, high=1.2)
    for mode in (0, 1, 2):
        for padding in (0, 1, 2):
            for ac in (False, True):
                yield Case((x, grid, mode, padding, ac))
    yield Case((g.t((1, 2, 4, 4), layout="cl"), g.t((1, 2, 2, 2), low=-1, high=1), 0, 0, False))


SPECS.add("aten::upsample_nearest2d.vec_out", lambda g: upsample_cases(g, True, False))
SPECS.add("aten::upsample_nearest2d.out", lambda g: upsample_cases(g, False, False))
SPECS.add("aten::upsample_bilinear2d.vec_out", lambda g: upsample_cases(g, True, True), tol=4)
SPECS.add("aten::upsample_bilinear2d.out", lambda g: upsample_cases(g, False, True), tol=4)
SPECS.add("aten::grid_sampler_2d.out", grid_sampler_cases, tol=10)
