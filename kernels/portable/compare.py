"""Comparisons, logical and bitwise ops (shifts included), isnan/isinf.

Comparisons promote both operands to their torch result dtype first (int64 == float16
compares in float16, like torch), then write bools (or whatever out holds).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from etbuild.kernels.portable.common import (
    FLOAT32,
    FLOAT64,
    INT64,
    TENSOR_SCALAR,
    TENSORS,
    Operand,
    broadcast_shape,
    cast,
    fit,
    named,
    result_dtype,
)
from etbuild.runtime.kernel_registry import ALL_DTYPES, INT_DTYPES, kernel
from etbuild.runtime.tensor import resize

Ufunc = Callable[..., np.ndarray]

# Tensor and Scalar overloads of each comparison, in the promoted dtype of both operands.
COMPARE: dict[str, Ufunc] = {
    "aten::eq.Tensor_out": np.equal,
    "aten::eq.Scalar_out": np.equal,
    "aten::ne.Tensor_out": np.not_equal,
    "aten::ne.Scalar_out": np.not_equal,
    "aten::lt.Tensor_out": np.less,
    "aten::lt.Scalar_out": np.less,
    "aten::le.Tensor_out": np.less_equal,
    "aten::le.Scalar_out": np.less_equal,
    "aten::gt.Tensor_out": np.greater,
    "aten::gt.Scalar_out": np.greater,
    "aten::ge.Tensor_out": np.greater_equal,
    "aten::ge.Scalar_out": np.greater_equal,
}
# Truth-value ops: any dtype, non-zero is true.
LOGICAL: dict[str, Ufunc] = {
    "aten::logical_and.out": np.logical_and,
    "aten::logical_or.out": np.logical_or,
    "aten::logical_xor.out": np.logical_xor,
}
# Bitwise ops on integers and bools, in the promoted dtype.
BITWISE: dict[str, Ufunc] = {
    "aten::bitwise_and.Tensor_out": np.bitwise_and,
    "aten::bitwise_and.Scalar_out": np.bitwise_and,
    "aten::bitwise_or.Tensor_out": np.bitwise_or,
    "aten::bitwise_or.Scalar_out": np.bitwise_or,
    "aten::bitwise_xor.Tensor_out": np.bitwise_xor,
    "aten::bitwise_xor.Scalar_out": np.bitwise_xor,
}
BITWISE_DTYPES = INT_DTYPES + ("bool",)
# Shifts on integers: shifting by the bit width or more gives 0 (left) or the sign (right).
SHIFT: dict[str, Ufunc] = {
    "aten::bitwise_left_shift.Tensor_out": np.left_shift,
    "aten::bitwise_left_shift.Tensor_Scalar_out": np.left_shift,
    "aten::bitwise_right_shift.Tensor_out": np.right_shift,
    "aten::bitwise_right_shift.Tensor_Scalar_out": np.right_shift,
}


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EXACT_INT = 2**53


def _weak(x: np.ndarray, value: Operand) -> bool:
    """Whether numpy, given `value` as a bare Python scalar, computes in x's dtype exactly as
    the promoted path does (value cast to x's dtype): a float, or an int of at most 53 bits,
    with a float32/float64 tensor (rounded once, like the cast); an int in range with an
    int64 tensor."""
    kind = type(value)
    if kind is float:
        return x.dtype == FLOAT32 or x.dtype == FLOAT64
    if kind is not int:
        return False
    if x.dtype == INT64:
        return _INT64_MIN <= value <= _INT64_MAX
    # An int of at most 53 bits is exact as a double, so any conversion rounds it just once.
    return (x.dtype == FLOAT32 or x.dtype == FLOAT64) and -_EXACT_INT <= value <= _EXACT_INT


def _same(a: Operand, b: Operand, out: np.ndarray) -> bool:
    """Whether a and b need no promotion: arrays of one dtype, one of them of out's shape (so
    the broadcast shape is out's, or the ufunc raises ValueError); or an array of out's shape
    and a Python scalar `_weak` allows."""
    if not isinstance(a, np.ndarray):
        return False
    if isinstance(b, np.ndarray):
        return a.dtype == b.dtype and (a.shape == out.shape or b.shape == out.shape)
    return a.shape == out.shape and _weak(a, b)


def _promoted(fn: Ufunc) -> Callable[[Operand, Operand, np.ndarray], np.ndarray]:
    def binary(a: Operand, b: Operand, out: np.ndarray) -> np.ndarray:
        if _same(a, b, out):
            try:
                fn(a, b, out=out, casting="unsafe")
                return out
            except ValueError:  # the operands broadcast beyond out: the general path resizes
                pass
        dtype = result_dtype(a, b)
        out = resize(out, broadcast_shape(a, b))
        fn(cast(a, dtype), cast(b, dtype), out=out, casting="unsafe")
        return out

    return binary


def _logical(fn: Ufunc) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    def binary(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and (a.shape == out.shape or b.shape == out.shape):
            try:
                fn(a, b, out=out, casting="unsafe")
                return out
            except ValueError:  # the operands broadcast beyond out: the general path resizes
                pass
        out = resize(out, broadcast_shape(a, b))
        fn(a, b, out=out, casting="unsafe")
        return out

    return binary


def _promoted_fast(fn: Ufunc) -> Callable[[Operand, Operand, np.ndarray], Callable[[], object] | None]:
    """The promoted kernel's first form bound at load: when a and b need no promotion (`_same`) and broadcast to
    out's shape, its one ufunc call."""

    def fast(a: Operand, b: Operand, out: np.ndarray) -> Callable[[], object] | None:
        if not (isinstance(out, np.ndarray) and _same(a, b, out)):
            return None
        try:
            if np.broadcast_shapes(a.shape, np.shape(b)) != out.shape:  # type: ignore[union-attr]
                return None
        except ValueError:
            return None
        return functools.partial(fn, a, b, out=out, casting="unsafe")

    return fast


def _operands(name: str) -> tuple[str, str]:
    """A comparison, bitwise or shift overload's operands: its `Scalar` overloads take a Scalar `other`."""
    return TENSOR_SCALAR if "Scalar" in name.partition(".")[2] else TENSORS


for _name, _fn in COMPARE.items():
    kernel(_name, dtypes=ALL_DTYPES, fast=_promoted_fast(_fn))(named(_promoted(_fn), _name, __name__, _operands(_name)))
for _name, _fn in BITWISE.items():
    kernel(_name, dtypes=BITWISE_DTYPES)(named(_promoted(_fn), _name, __name__, _operands(_name)))
for _name, _fn in SHIFT.items():
    kernel(_name, dtypes=INT_DTYPES)(named(_promoted(_fn), _name, __name__, _operands(_name)))
for _name, _fn in LOGICAL.items():
    kernel(_name, dtypes=ALL_DTYPES)(named(_logical(_fn), _name, __name__))


def _logical_not_fast(x: np.ndarray, out: np.ndarray) -> Callable[[], object] | None:
    """logical_not bound at load when out already has x's shape: the kernel's one ufunc call."""
    if not (isinstance(x, np.ndarray) and isinstance(out, np.ndarray) and out.shape == x.shape):
        return None
    return functools.partial(np.logical_not, x, out=out, casting="unsafe")


@kernel("aten::logical_not.out", dtypes=ALL_DTYPES, fast=_logical_not_fast)
def logical_not_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    out = fit(out, x.shape)
    np.logical_not(x, out=out, casting="unsafe")
    return out


@kernel("aten::bitwise_not.out", dtypes=BITWISE_DTYPES)
def bitwise_not_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    out = fit(out, x.shape)
    np.invert(x, out=out, casting="unsafe")
    return out


def _float_test(fn: Ufunc, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """fn on float inputs; integers and bools are never NaN or infinite."""
    out = fit(out, x.shape)
    if x.dtype.kind == "f":
        fn(x, out=out, casting="unsafe")
    else:
        out.fill(False)
    return out


@kernel("aten::isnan.out", dtypes=ALL_DTYPES)
def isnan_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _float_test(np.isnan, x, out)


@kernel("aten::isinf.out", dtypes=ALL_DTYPES)
def isinf_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _float_test(np.isinf, x, out)
