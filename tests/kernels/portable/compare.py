"""Conformance specs of the etbuild.kernels.portable.compare kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tests.kernels.conformance import UNARY_SHAPES, Case, Gen, SpecTable, binary, unary, with_scalar

SPECS = SpecTable()


COMPARE_TENSOR = [
    "aten::eq.Tensor_out",
    "aten::ne.Tensor_out",
    "aten::lt.Tensor_out",
    "aten::le.Tensor_out",
    "aten::gt.Tensor_out",
    "aten::ge.Tensor_out",
]


COMPARE_SCALAR = [
    "aten::eq.Scalar_out",
    "aten::ne.Scalar_out",
    "aten::lt.Scalar_out",
    "aten::le.Scalar_out",
    "aten::gt.Scalar_out",
    "aten::ge.Scalar_out",
]


def bitwise_cases(g: Gen) -> Iterator[Case]:
    yield from binary(g, mixed=False)
    yield Case((g.t((3, 4)), g.t((4,), torch.bool)))
    yield Case((g.t((3, 4)), g.t((), torch.int64)))


def bitwise_scalar_cases(g: Gen) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES[:6]:
        for s in [True, 3] if g.is_bool else [2, -3, True]:
            yield Case((g.t(shape, layout=layout), s))


def shift_cases(g: Gen, scalar: bool) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES[:6]:
        x = g.t(shape, layout=layout)
        yield Case((x, 3) if scalar else (x, g.t(shape[-1:], low=0, high=8 * g.dtype.itemsize + 2)))


SPECS.add([*COMPARE_TENSOR, "aten::logical_and.out", "aten::logical_or.out", "aten::logical_xor.out"], binary)
SPECS.add(COMPARE_SCALAR, with_scalar)
SPECS.add(["aten::logical_not.out", "aten::isnan.out", "aten::isinf.out", "aten::bitwise_not.out"], unary)
SPECS.add(
    ["aten::bitwise_and.Tensor_out", "aten::bitwise_or.Tensor_out", "aten::bitwise_xor.Tensor_out"], bitwise_cases
)
SPECS.add(
    ["aten::bitwise_and.Scalar_out", "aten::bitwise_or.Scalar_out", "aten::bitwise_xor.Scalar_out"],
    bitwise_scalar_cases,
)
SPECS.add(
    ["aten::bitwise_left_shift.Tensor_out", "aten::bitwise_right_shift.Tensor_out"], lambda g: shift_cases(g, False)
)
SPECS.add(
    ["aten::bitwise_left_shift.Tensor_Scalar_out", "aten::bitwise_right_shift.Tensor_Scalar_out"],
    lambda g: shift_cases(g, True),
)
