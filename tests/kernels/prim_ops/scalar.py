"""Conformance specs of the etbuild.kernels.prim_ops.scalar kernels: their cases against torch."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from tests.kernels.conformance import UNARY_SHAPES, Case, CaseFn, Gen, SpecTable

SPECS = SpecTable()


PRIM_REFS: dict[int, dict[str, Callable[..., Any]]] = {  # by arity
    1: {
        "executorch_prim::neg.Scalar": lambda a: -a,
        "executorch_prim::sym_float.Scalar": torch.sym_float,
        "executorch_prim::sym_int.Scalar": torch.sym_int,
        "executorch_prim::sym_not.Scalar": torch.sym_not,
        "executorch_prim::ceil.Scalar": math.ceil,
        "executorch_prim::trunc.Scalar": math.trunc,
        "executorch_prim::round.Scalar": round,
    },
    2: {
        "executorch_prim::add.Scalar": lambda a, b: a + b,
        "executorch_prim::sub.Scalar": lambda a, b: a - b,
        "executorch_prim::mul.Scalar": lambda a, b: a * b,
        "executorch_prim::floordiv.Scalar": lambda a, b: (
            float(math.floor(a / b)) if isinstance(a, float) or isinstance(b, float) else math.floor(a / b)
        ),
        "executorch_prim::truediv.Scalar": lambda a, b: a / b,
        "executorch_prim::mod.Scalar": lambda a, b: a - b * math.floor(a / b),
        "executorch_prim::eq.Scalar": lambda a, b: a == b,
        "executorch_prim::gt.Scalar": lambda a, b: a > b,
        "executorch_prim::lt.Scalar": lambda a, b: a < b,
        "executorch_prim::ge.Scalar": lambda a, b: a >= b,
        "executorch_prim::le.Scalar": lambda a, b: a <= b,
        "executorch_prim::sym_max.Scalar": torch.sym_max,
        "executorch_prim::sym_min.Scalar": torch.sym_min,
    },
    3: {"executorch_prim::sym_ite.Scalar": torch.sym_ite},
}


PRIM_ARGS: dict[int, list[tuple[Any, ...]]] = {
    1: [(7,), (-3,), (2.5,), (-2.5,), (True,), (0,)],
    2: [(7, 3), (-7, 3), (7, -3), (4, 4), (2.5, 0.5), (3, 1.5), (-1.5, 2)],
    3: [(True, 3, 4), (False, 3, 4), (True, 1.5, 2.5)],
}


INT_ONLY = {"executorch_prim::mod.Scalar", "executorch_prim::sym_not.Scalar"}


def prim_cases(name: str, arity: int) -> CaseFn:
    def cases(g: Gen) -> Iterator[Case]:
        for args in PRIM_ARGS[arity]:
            if name not in INT_ONLY or all(isinstance(a, int) for a in args):
                yield Case(args)

    return cases


def sym_size_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4), layout="t"), 0))
    yield Case((g.t((2, 3, 4)), -1))
    yield Case((g.t((0, 5)), 0))


for _arity, _refs in PRIM_REFS.items():
    for _name, _ref in _refs.items():
        SPECS.add(_name, prim_cases(_name, _arity), ref=lambda c, f=_ref: f(*c.args), outs="none")

SPECS.add("aten::sym_size.int", sym_size_cases)
SPECS.add("aten::sym_numel", lambda g: [Case((g.t(s, layout=lay),)) for s, lay in UNARY_SHAPES])
SPECS.add("aten::_local_scalar_dense", lambda g: [Case((g.t(s),)) for s in [(), (1,), (1, 1, 1)]])
