"""Conformance specs of the etbuild.kernels.portable.convolution kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


def conv(
    g: Gen,
    x: tuple[int, ...],
    w: tuple[int, ...],
    bias: bool,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int = 1,
    transposed: bool = False,
    output_padding: list[int] | None = None,
    layout: str = "c",
) -> Case:
    out_ch = w[1] * groups if transposed else w[0]
    b = g.t((out_ch,)) if bias else None
    op = output_padding or [0] * len(stride)
    return Case((g.t(x, layout=layout), g.t(w), b, stride, padding, dilation, transposed, op, groups))


def conv_cases(g: Gen) -> Iterator[Case]:
    yield conv(g, (2, 4, 7, 6), (6, 4, 3, 3), True, [1, 1], [1, 1], [1, 1])
    yield conv(g, (2, 4, 7, 6), (6, 4, 3, 3), False, [2, 2], [0, 0], [1, 1], layout="cl")
    yield conv(g, (1, 4, 9, 8), (6, 4, 3, 2), True, [1, 2], [2, 1], [2, 1])
    yield conv(g, (2, 4, 5, 5), (6, 2, 3, 3), True, [1, 1], [1, 1], [1, 1], groups=2)
    yield conv(g, (1, 4, 5, 5), (4, 1, 3, 3), True, [1, 1], [1, 1], [1, 1], groups=4, layout="cl")
    yield conv(g, (2, 3, 9), (4, 3, 3), True, [2], [1], [1])
    yield conv(g, (2, 3, 9), (3, 1, 5), False, [1], [2], [1], groups=3, layout="t")
    yield conv(g, (1, 2, 4, 4, 4), (3, 2, 2, 2, 2), True, [1, 1, 1], [0, 0, 0], [1, 1, 1])
    yield conv(g, (1, 4, 5, 5), (4, 3, 3, 3), True, [2, 2], [1, 1], [1, 1], transposed=True, output_padding=[1, 1])
    yield conv(g, (2, 4, 6), (4, 3, 3), False, [2], [0], [1], groups=2, transposed=True)
    yield conv(g, (1, 2, 4, 3), (2, 3, 2, 3), True, [1, 2], [0, 1], [2, 1], transposed=True)


SPECS.add("aten::convolution.out", conv_cases, tol=10)
