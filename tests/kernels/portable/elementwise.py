"""Conformance specs of the etbuild.kernels.portable.elementwise kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

import torch

from tests.kernels.conformance import UNARY_SHAPES, Case, Gen, SpecTable, binary, pairs, unary, with_scalar

SPECS = SpecTable()


def add_cases(g: Gen, scalar: bool, bools: bool = True) -> Iterator[Case]:
    yield from (with_scalar(g, 1, bools=bools) if scalar else binary(g, 1))
    alpha = 0.5 if g.is_float else 2
    if not g.is_bool:
        yield from (with_scalar(g, alpha, bools=bools) if scalar else binary(g, alpha, mixed=False))


def pow_cases(g: Gen) -> Iterator[Case]:
    low = None if g.is_float else 0
    for shape, layout in UNARY_SHAPES:
        yield Case((g.t(shape, layout=layout), g.t(shape[-1:], low=low, high=4)))
    yield Case((g.t((3, 4)), g.t((), torch.float32, low=0, high=3)))


def clamp_cases(g: Gen) -> Iterator[Case]:
    bounds = [(-1.0, 1.0), (None, 2.0), (0.5, None)] if g.is_float else [(-2, 3), (None, 1), (2, -1), (0.5, None)]
    for lo, hi in bounds:
        yield from unary(g, lo, hi)


def clamp_tensor_cases(g: Gen) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES:
        yield Case((g.t(shape, layout=layout), g.t(shape[-1:]), g.t(())))
    yield Case((g.t((3, 4)), None, g.t((3, 1))))
    yield Case((g.t((3, 4)), g.t((4,)), None))


SPECS.add(
    [
        "aten::sqrt.out",
        "aten::rsqrt.out",
        "aten::exp.out",
        "aten::exp2.out",
        "aten::expm1.out",
        "aten::log.out",
        "aten::log1p.out",
        "aten::log2.out",
        "aten::log10.out",
        "aten::sin.out",
        "aten::cos.out",
        "aten::tan.out",
        "aten::tanh.out",
        "aten::asin.out",
        "aten::acos.out",
        "aten::atan.out",
        "aten::sinh.out",
        "aten::cosh.out",
        "aten::asinh.out",
        "aten::acosh.out",
        "aten::atanh.out",
        "aten::erf.out",
        "aten::reciprocal.out",
        "aten::neg.out",
        "aten::abs.out",
        "aten::sign.out",
        "aten::square.out",
        "aten::floor.out",
        "aten::ceil.out",
        "aten::round.out",
        "aten::trunc.out",
    ],
    unary,
)
SPECS.add("aten::round.decimals_out", lambda g: chain(unary(g, 2), unary(g, -1, special=False)))
SPECS.add(
    ["aten::mul.out", "aten::maximum.out", "aten::minimum.out", "aten::atan2.out", "aten::div.out"],
    binary,
)
SPECS.add(
    ["aten::remainder.Tensor_out", "aten::fmod.Tensor_out", "aten::floor_divide.out"],
    lambda g: binary(g, divisor=True),
)
SPECS.add(["aten::mul.Scalar_out", "aten::div.Scalar_out"], with_scalar)
SPECS.add(["aten::remainder.Scalar_out", "aten::fmod.Scalar_out"], lambda g: with_scalar(g, divisor=True))
SPECS.add(["aten::add.out", "aten::sub.out", "aten::rsub.Tensor_out"], lambda g: add_cases(g, False))
SPECS.add("aten::add.Scalar_out", lambda g: add_cases(g, True))
SPECS.add(["aten::sub.Scalar_out", "aten::rsub.Scalar_out"], lambda g: add_cases(g, True, bools=False))
SPECS.add(
    "aten::div.out_mode",
    lambda g: chain.from_iterable(binary(g, m, divisor=True) for m in (None, "trunc", "floor")),
)
SPECS.add(
    "aten::div.Scalar_mode_out",
    lambda g: chain.from_iterable(with_scalar(g, m, divisor=True) for m in (None, "trunc", "floor")),
)
SPECS.add("aten::pow.Tensor_Tensor_out", pow_cases)
SPECS.add(
    "aten::pow.Tensor_Scalar_out",
    lambda g: chain.from_iterable(unary(g, e, special=False) for e in (2, 3, 0.5, 0)),
)
SPECS.add(
    "aten::pow.Scalar_out",
    lambda g: (Case((s, g.t(shape, layout=lay, low=0, high=4))) for s in (2, 1.5) for shape, lay in UNARY_SHAPES),
)
SPECS.add("aten::clamp.out", clamp_cases)
SPECS.add("aten::clamp.Tensor_out", clamp_tensor_cases)
SPECS.add(
    "aten::addcmul.out",
    lambda g: (Case((a, b, g.t(b.shape), v)) for a, b in pairs(g, mixed=False) for v in (1, 0.5)),
)
SPECS.add(
    "aten::lerp.Scalar_out",
    lambda g: (Case((a, b, w)) for a, b in pairs(g, mixed=False) for w in (0.3, 0.75)),
)
