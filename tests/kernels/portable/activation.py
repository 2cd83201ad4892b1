"""Conformance specs of the etbuild.kernels.portable.activation kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

import torch

from tests.kernels.conformance import UNARY_SHAPES, Case, Gen, SpecTable, unary

SPECS = SpecTable()


# torch's vectorized float32 gelu gives nan at ±inf (x·Φ(x) is ±inf/0): no specials for 'none'.
SPECS.add("aten::gelu.out", lambda g: chain(unary(g, "none", special=False), unary(g, "tanh")))


def logit_cases(g: Gen) -> Iterator[Case]:
    for eps in (None, 0.1):
        for shape, layout in UNARY_SHAPES:
            yield Case((g.t(shape, layout=layout, low=0.01, high=0.99), eps))
        yield Case((g.special(), eps))


def glu_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((4, 6)), -1))
    yield Case((g.t((2, 4, 3), layout="t"), 1))
    yield Case((g.t((2, 4, 3, 2), layout="cl"), 0))
    yield Case((g.t((0, 2)), 1))


SPECS.add(
    [
        "aten::relu.out",
        "aten::sigmoid.out",
        "aten::silu.out",
        "aten::hardswish.out",
        "aten::hardsigmoid.out",
        "aten::mish.out",
    ],
    unary,
)
SPECS.add(
    "aten::hardtanh.out",
    lambda g: chain(unary(g, 0, 6), () if g.dtype == torch.uint8 else unary(g, -1, 1)),
)
SPECS.add("aten::leaky_relu.out", lambda g: chain(unary(g, 0.01), unary(g, 0.2, special=False)))
SPECS.add("aten::elu.out", lambda g: chain(unary(g, 1, 1, 1), unary(g, 0.5, 2, 1.5)))
SPECS.add("aten::celu.out", lambda g: chain(unary(g, 1.0), unary(g, 0.5, special=False)))
SPECS.add("aten::softplus.out", lambda g: chain(unary(g, 1, 20), unary(g, 2, 1)))
SPECS.add("aten::threshold.out", lambda g: chain(unary(g, 1, 9), unary(g, 0.5, -1.0) if g.is_float else ()))
SPECS.add("aten::logit.out", logit_cases)
SPECS.add("aten::glu.out", glu_cases)
