"""Conformance specs of the etbuild.kernels.portable.softmax kernels: their cases against torch."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


def softmax_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 5)), 1, False))
    yield Case((g.t((3, 5), layout="t"), 0, False))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), 1, False))
    yield Case((g.t(()), 0, False))
    yield Case((g.t((0, 3)), -1, False))
    yield Case((torch.stack([g.special(), g.special().flip(0)]), 1, False))
    yield Case((torch.full((2, 3), -math.inf, dtype=g.dtype), 1, False))


SPECS.add(["aten::_softmax.out", "aten::_log_softmax.out"], softmax_cases, tol=4)
