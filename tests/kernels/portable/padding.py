"""Conformance specs of the etbuild.kernels.portable.padding kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator

from tests.kernels.conformance import Case, CaseFn, Gen, SpecTable

SPECS = SpecTable()


def pad_cases(g: Gen) -> Iterator[Case]:
    value = 1.5 if g.is_float else (True if g.is_bool else 3)
    yield Case((g.t((2, 3, 4)), [1, 2], 0))
    yield Case((g.t((2, 3, 4), layout="t"), [1, 1, 2, 0], value))
    yield Case((g.t((2, 3, 4)), [-1, 1], value))
    yield Case((g.t((2, 3, 4)), [0, 0, 0, 0, 1, 1], 0))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [1, 1, 1, 1], value))


def border_pad_cases(nsp: int) -> CaseFn:
    def cases(g: Gen) -> Iterator[Case]:
        spatial = (4, 5, 3)[:nsp]
        yield Case((g.t((2, 3, *spatial)), [1, 2] * nsp))
        yield Case((g.t((3, *spatial), layout="t"), [2, 0] * nsp))
        yield Case((g.t((1, 2, *spatial)), [0, 0] * nsp))

    return cases


SPECS.add("aten::constant_pad_nd.out", pad_cases)
for _nsp in (1, 2, 3):
    SPECS.add([f"aten::reflection_pad{_nsp}d.out", f"aten::replication_pad{_nsp}d.out"], border_pad_cases(_nsp))
