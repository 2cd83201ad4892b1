"""Conformance specs of the etbuild.kernels.prim_ops.view kernel: `et_view` against `Tensor.view`."""

from __future__ import annotations

from collections.abc import Iterator

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


def et_view_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), [6, 4]))
    yield Case((g.t((2, 3, 4)), [4, -1]))
    yield Case((g.t((2, 3, 4)), [-1]))
    yield Case((g.t(()), [1, 1]))
    yield Case((g.t((1,)), []))
    yield Case((g.t((0, 3)), [3, 0]))


SPECS.add(
    "executorch_prim::et_view.default",
    et_view_cases,
    ref=lambda c: c.args[0].view(c.args[1]),
    run=lambda fn, args: fn(*args),
    outs="none",
)
