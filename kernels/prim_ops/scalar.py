"""Prim ops on Int/Double/Bool values (symbolic sizes): results are returned, not written.

Semantics are Python's, as when torch.export traced them: `//` floors, `%` takes the
divisor's sign, `/` always gives a float.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import named
from etbuild.runtime.kernel_registry import ALL_DTYPES, kernel

Scalar = bool | int | float


def _widen(value: Scalar, *operands: Scalar) -> Scalar:
    """max/min of an int and a float is a float, as torch.sym_max gives."""
    return float(value) if any(isinstance(x, float) for x in operands) else value


BINARY: dict[str, Callable[[Scalar, Scalar], Scalar]] = {
    "executorch_prim::add.Scalar": operator.add,
    "executorch_prim::sub.Scalar": operator.sub,
    "executorch_prim::mul.Scalar": operator.mul,
    "executorch_prim::floordiv.Scalar": operator.floordiv,
    "executorch_prim::truediv.Scalar": operator.truediv,
    "executorch_prim::mod.Scalar": operator.mod,
    "executorch_prim::eq.Scalar": operator.eq,
    "executorch_prim::gt.Scalar": operator.gt,
    "executorch_prim::lt.Scalar": operator.lt,
    "executorch_prim::ge.Scalar": operator.ge,
    "executorch_prim::le.Scalar": operator.le,
    "executorch_prim::sym_max.Scalar": lambda a, b: _widen(max(a, b), a, b),
    "executorch_prim::sym_min.Scalar": lambda a, b: _widen(min(a, b), a, b),
}
UNARY: dict[str, Callable[[Scalar], Scalar]] = {
    "executorch_prim::neg.Scalar": operator.neg,
    "executorch_prim::sym_float.Scalar": float,
    "executorch_prim::sym_int.Scalar": int,
    "executorch_prim::sym_not.Scalar": operator.not_,
    "executorch_prim::ceil.Scalar": math.ceil,
    "executorch_prim::trunc.Scalar": math.trunc,
    "executorch_prim::round.Scalar": round,
}


def _binary(fn: Callable[[Scalar, Scalar], Scalar]) -> Callable[[Scalar, Scalar], Scalar]:
    def prim(a: Scalar, b: Scalar) -> Scalar:
        return fn(a, b)

    return prim


def _unary(fn: Callable[[Scalar], Scalar]) -> Callable[[Scalar], Scalar]:
    def prim(a: Scalar) -> Scalar:
        return fn(a)

    return prim


for _name, _fn in BINARY.items():
    kernel(_name, dtypes=())(named(_binary(_fn), _name, __name__))
for _name, _fn in UNARY.items():
    kernel(_name, dtypes=())(named(_unary(_fn), _name, __name__))


@kernel("executorch_prim::sym_ite.Scalar", dtypes=())
def sym_ite_scalar(cond: Scalar, if_true: Scalar, if_false: Scalar) -> Scalar:
    return if_true if cond else if_false


@kernel("aten::sym_size.int", dtypes=ALL_DTYPES)
def sym_size_int(x: np.ndarray, dim: int) -> int:
    return int(x.shape[dim])


@kernel("aten::sym_numel", dtypes=ALL_DTYPES)
def sym_numel(x: np.ndarray) -> int:
    return int(x.size)


@kernel("aten::_local_scalar_dense", dtypes=ALL_DTYPES)
def local_scalar_dense(x: np.ndarray) -> Scalar:
    """The value of a one-element tensor (`tensor.item()`), as a Python bool, int or float."""
    if x.size != 1:
        raise KernelError(f"_local_scalar_dense: expected a tensor of one element; got shape {list(x.shape)}")
    value: Scalar = x.reshape(()).item()
    return value
