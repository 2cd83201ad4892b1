"""Conformance specs of the etbuild.kernels.portable.sampling kernels: their cases against torch."""

from __future__ import annotations

from tests.kernels.conformance import Case, SpecTable

SPECS = SpecTable()


SPECS.add(
    ["aten::rand.out", "aten::randn.out"],
    lambda g: [Case(([2, 3],), (g.dtype,)), Case(([],), (g.dtype,))],
    values=False,
)
SPECS.add(
    "aten::native_dropout.out",
    lambda g: [
        Case((g.t((3, 4)), 0.5, False)),
        Case((g.t((3, 4), layout="t"), 0.0, True)),
        Case((g.t((2, 2)), 1.0, True)),
    ],
)
