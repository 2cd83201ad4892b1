"""Elementwise arithmetic and math: add/sub/mul/div, pow, remainder, unary math, clamp.

Every kernel computes in the torch-promoted dtype of its inputs (float16 in float32, rounded
once) and casts into `out`, which is resized to the broadcast shape. When the operands are
already arrays of out's float32/float64 dtype, the ufunc writes into out in one call
(common.direct) and the promotion work is skipped. Integer division by zero is left to numpy
(torch raises); float division follows IEEE.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.numerics.erf import erf, erf32
from etbuild.kernels.numerics.ufuncs import bound_ufunc
from etbuild.kernels.portable.common import (
    BOOL,
    EXACT,
    FLOAT16,
    FLOAT32,
    NATIVE,
    SCALAR_TENSOR,
    TENSOR_SCALAR,
    TENSORS,
    Operand,
    broadcast_shape,
    cast,
    direct,
    fit,
    float_dtype,
    named,
    opmath,
    prebound,
    quiet,
    result_dtype,
    store,
)
from etbuild.runtime.kernel_registry import ALL_DTYPES, FLOAT_DTYPES, REAL_DTYPES, kernel
from etbuild.runtime.tensor import resize

Ufunc = Callable[..., np.ndarray]


def _write(out: np.ndarray, fn: Ufunc, dtype: np.dtype, *operands: Operand) -> np.ndarray:
    """out = fn(*operands) computed in opmath(dtype), written straight into out."""
    out = fit(out, broadcast_shape(*operands))
    ct = opmath(dtype)
    fn(*(cast(x, ct) for x in operands), out=out, casting="unsafe")
    return out


def _scalar_bound(fn: Ufunc, a: Operand, b: Operand, out: np.ndarray, to_float: bool) -> Callable[[], Any] | None:
    """At load: `_write(out, fn, …, a, b)` for a tensor a of out's float32/float64 dtype and shape and
    a number b, bound once (b cast once as `_write` casts it on every call); None otherwise."""
    if not isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or out.dtype not in NATIVE:
        return None
    dtype = result_dtype(a, b)
    ct = opmath(float_dtype(dtype) if to_float else dtype)
    if not a.dtype == ct == out.dtype or a.shape != out.shape:
        return None
    if fn is power_scalar:
        return _power_scalar_bound(a, cast(b, ct), out)
    return bound_ufunc(fn, a, cast(b, ct), out=out)  # a, b and out all have ct: nothing to cast


def _rsqrt(x: np.ndarray, out: np.ndarray, casting: str) -> np.ndarray:
    np.copyto(out, 1 / np.sqrt(x), casting=casting)
    return out


def _erf(x: np.ndarray, out: np.ndarray, casting: str) -> np.ndarray:
    """erf into out: in place for float16/float32 x into a float32 out, else by a store of erf's result."""
    if out.dtype == FLOAT32 and x.dtype in (FLOAT32, FLOAT16):
        return erf32(x, out)
    return store(out, erf(x))


def _reciprocal(x: np.ndarray, out: np.ndarray, casting: str) -> np.ndarray:
    return np.divide(1, x, out=out, casting=casting)


def _sign(x: np.ndarray, out: np.ndarray, casting: str) -> np.ndarray:
    """sign(nan) is 0 in torch (numpy gives nan): (x > 0) - (x < 0)."""
    return np.subtract(x > 0, x < 0, out=out, casting=casting, dtype=np.int8)


# Unary ops whose result is float: integer and bool inputs compute in float32.
FLOAT_UNARY: dict[str, Ufunc] = {
    "aten::sqrt.out": np.sqrt,
    "aten::rsqrt.out": _rsqrt,
    "aten::exp.out": np.exp,
    "aten::exp2.out": np.exp2,
    "aten::expm1.out": np.expm1,
    "aten::log.out": np.log,
    "aten::log1p.out": np.log1p,
    "aten::log2.out": np.log2,
    "aten::log10.out": np.log10,
    "aten::sin.out": np.sin,
    "aten::cos.out": np.cos,
    "aten::tan.out": np.tan,
    "aten::tanh.out": np.tanh,
    "aten::asin.out": np.arcsin,
    "aten::acos.out": np.arccos,
    "aten::atan.out": np.arctan,
    "aten::sinh.out": np.sinh,
    "aten::cosh.out": np.cosh,
    "aten::asinh.out": np.arcsinh,
    "aten::acosh.out": np.arccosh,
    "aten::atanh.out": np.arctanh,
    "aten::erf.out": _erf,
    "aten::reciprocal.out": _reciprocal,
}

# Unary ops that keep the input dtype; rounding is the identity on integers.
SAME_UNARY: dict[str, tuple[Ufunc, tuple[str, ...]]] = {
    "aten::neg.out": (np.negative, REAL_DTYPES),
    "aten::abs.out": (np.abs, REAL_DTYPES),
    "aten::sign.out": (_sign, REAL_DTYPES),
    "aten::square.out": (np.square, REAL_DTYPES),
    "aten::floor.out": (np.floor, REAL_DTYPES),
    "aten::ceil.out": (np.ceil, REAL_DTYPES),
    "aten::round.out": (np.rint, REAL_DTYPES),
    "aten::trunc.out": (np.trunc, REAL_DTYPES),
}
_ROUNDING = {"aten::floor.out", "aten::ceil.out", "aten::round.out", "aten::trunc.out"}


def _float_unary(fn: Ufunc) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    @quiet
    def unary(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        done = direct(fn, out, x)
        return done if done is not None else _write(out, fn, float_dtype(x.dtype), x)

    return unary


def _unary_fast(fn: Ufunc) -> Callable[[np.ndarray, np.ndarray], Callable[[], Any] | None]:
    """The fast path of a unary kernel: its `direct` call, bound at load."""
    return lambda x, out: prebound(fn, out, x)


def _same_unary(fn: Ufunc, rounding: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    @quiet
    def unary(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        done = direct(fn, out, x)
        if done is not None:
            return done
        if rounding and x.dtype.kind != "f":
            return _write(out, np.positive, x.dtype, x)
        return _write(out, fn, x.dtype, x)

    return unary


for _name, _fn in FLOAT_UNARY.items():
    kernel(_name, dtypes=ALL_DTYPES, fast=_unary_fast(_fn))(named(_float_unary(_fn), _name, __name__))
for _name, (_fn, _dtypes) in SAME_UNARY.items():
    kernel(_name, dtypes=_dtypes, fast=_unary_fast(_fn))(named(_same_unary(_fn, _name in _ROUNDING), _name, __name__))


@kernel("aten::round.decimals_out", dtypes=FLOAT_DTYPES)
@quiet
def round_decimals_out(x: np.ndarray, decimals: int, out: np.ndarray) -> np.ndarray:
    """Half-to-even at 10**-decimals: rint(x * 10^d) / 10^d (or / then * for d < 0)."""
    ct = opmath(x.dtype)
    scale = cast(10.0 ** abs(decimals), ct)
    y = cast(x, ct)
    if decimals >= 0:
        return _write(out, np.divide, ct, np.rint(y * scale), scale)
    return _write(out, np.multiply, ct, np.rint(y / scale), scale)


# torch's CPU pow(tensor, scalar) computes these exponents without pow (pow_tensor_scalar_optimized_kernel):
# x·x, (x·x)·x, sqrt(x), 1/sqrt(x), 1/x, 1/(x·x). Doing the same gives torch's bits (but for 0.5, where
# numpy's correctly rounded sqrt and torch's differ in the last bit at times), and is several times
# faster than numpy's power (RMSNorm's pow(x, 2), GPT-2's GELU's pow(x, 3)).
_TORCH_EXPONENTS = frozenset({2.0, 3.0, 0.5, -0.5, -1.0, -2.0})


def _special_power(x: np.ndarray, e: float, out: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """x**e for an exponent of _TORCH_EXPONENTS, written into out; tmp is scratch of out's shape and
    dtype (it may be out itself unless out shares memory with x)."""
    if e == 0.5:
        return np.sqrt(x, out=out, casting="unsafe")
    if e == 2.0:
        return np.multiply(x, x, out=out, casting="unsafe")
    if e == -1.0:
        return np.divide(1, x, out=out, casting="unsafe")
    if e == 3.0:
        np.multiply(x, x, out=tmp, casting="unsafe")
        return np.multiply(tmp, x, out=out, casting="unsafe")
    if e == -0.5:
        np.sqrt(x, out=tmp, casting="unsafe")
    else:  # -2
        np.multiply(x, x, out=tmp, casting="unsafe")
    return np.divide(1, tmp, out=out, casting="unsafe")


def _is_special(x: Any, e: Any) -> bool:
    """A float tensor and a real number (or 0-d array, as `cast` gives) of _TORCH_EXPONENTS."""
    is_float_tensor = isinstance(x, np.ndarray) and x.dtype.kind == "f"
    return is_float_tensor and np.ndim(e) == 0 and np.asarray(e).dtype.kind in "fiu" and float(e) in _TORCH_EXPONENTS


def power_scalar(x: Any, e: Any, out: np.ndarray, casting: str = "unsafe") -> np.ndarray:
    """np.power(x, e) as torch's CPU kernel computes it (see _TORCH_EXPONENTS): a ufunc-shaped function."""
    if not _is_special(x, e):
        return np.power(x, e, out=out, casting=casting)
    tmp = out if out.dtype == x.dtype and not np.may_share_memory(out, x) else np.empty(np.shape(out), x.dtype)
    return _special_power(x, float(e), out, tmp)


def _power_scalar_bound(x: np.ndarray, e: Any, out: np.ndarray) -> Callable[[], Any]:
    """power_scalar(x, e, out) bound at load, its scratch allocated once."""
    if not _is_special(x, e):
        return bound_ufunc(np.power, x, e, out=out)
    tmp = out if not np.may_share_memory(out, x) else np.empty_like(out)
    return functools.partial(_special_power, x, float(e), out, tmp)


# Binary ops on the promoted dtype of both operands, Tensor and Scalar overloads alike:
# name -> (ufunc, dtypes, the overload's operands).
BINARY: dict[str, tuple[Ufunc, tuple[str, ...], tuple[str, str]]] = {
    "aten::mul.out": (np.multiply, ALL_DTYPES, TENSORS),
    "aten::mul.Scalar_out": (np.multiply, ALL_DTYPES, TENSOR_SCALAR),
    "aten::remainder.Tensor_out": (np.remainder, REAL_DTYPES, TENSORS),
    "aten::remainder.Scalar_out": (np.remainder, REAL_DTYPES, TENSOR_SCALAR),
    "aten::fmod.Tensor_out": (np.fmod, REAL_DTYPES, TENSORS),
    "aten::fmod.Scalar_out": (np.fmod, REAL_DTYPES, TENSOR_SCALAR),
    "aten::floor_divide.out": (np.floor_divide, REAL_DTYPES, TENSORS),
    "aten::maximum.out": (np.maximum, ALL_DTYPES, TENSORS),
    "aten::minimum.out": (np.minimum, ALL_DTYPES, TENSORS),
    "aten::pow.Tensor_Tensor_out": (np.power, REAL_DTYPES, TENSORS),
    "aten::pow.Tensor_Scalar_out": (power_scalar, REAL_DTYPES, TENSOR_SCALAR),
    "aten::pow.Scalar_out": (np.power, REAL_DTYPES, SCALAR_TENSOR),
}
FLOAT_BINARY: dict[str, tuple[Ufunc, tuple[str, str]]] = {
    "aten::atan2.out": (np.arctan2, TENSORS),
    "aten::div.out": (np.true_divide, TENSORS),
    "aten::div.Scalar_out": (np.true_divide, TENSOR_SCALAR),
}


# Dtypes for which `direct` gives what the promoted path gives: a binary op computes in its
# operands' own dtype for all of them but float16; a to-float op (div) only for float32/float64.
_EXACT_SUB = tuple(t for t in EXACT if t != BOOL)  # bool subtraction raises on the general path


def _binary(fn: Ufunc, to_float: bool) -> Callable[[Operand, Operand, np.ndarray], np.ndarray]:
    exact = NATIVE if to_float else EXACT

    @quiet
    def binary(a: Operand, b: Operand, out: np.ndarray) -> np.ndarray:
        done = direct(fn, out, a, b, exact=exact)
        if done is not None:
            return done
        dtype = result_dtype(a, b)
        return _write(out, fn, float_dtype(dtype) if to_float else dtype, a, b)

    return binary


def _binary_fast(fn: Ufunc, to_float: bool) -> Callable[[Operand, Operand, np.ndarray], Callable[[], Any] | None]:
    """The fast path of `_binary(fn, to_float)`: its one ufunc call, bound at load."""
    exact = NATIVE if to_float else EXACT

    def fast(a: Operand, b: Operand, out: np.ndarray) -> Callable[[], Any] | None:
        if isinstance(b, np.ndarray):
            return prebound(fn, out, a, b, exact=exact)
        return _scalar_bound(fn, a, b, out, to_float)

    return fast


for _name, (_fn, _dtypes, _operands) in BINARY.items():
    _kernel = named(_binary(_fn, False), _name, __name__, _operands)
    kernel(_name, dtypes=_dtypes, fast=_binary_fast(_fn, False) if _operands != SCALAR_TENSOR else None)(_kernel)
for _name, (_fn, _operands) in FLOAT_BINARY.items():
    _kernel = named(_binary(_fn, True), _name, __name__, _operands)
    kernel(_name, dtypes=ALL_DTYPES, fast=_binary_fast(_fn, True))(_kernel)


def _add(a: Operand, b: Operand, alpha: float, sign: int, out: np.ndarray) -> np.ndarray:
    """out = a + sign * alpha * b in the promoted dtype."""
    if alpha == 1:
        done = direct(np.add if sign > 0 else np.subtract, out, a, b, exact=EXACT if sign > 0 else _EXACT_SUB)
        if done is not None:
            return done
    dtype = result_dtype(a, b)
    if dtype.kind == "b" and sign < 0:
        raise KernelError("subtraction of bool tensors is not supported")
    ct = opmath(dtype)
    scaled = cast(b, ct) if alpha == 1 else cast(b, ct) * cast(alpha, ct)
    return _write(out, np.add if sign > 0 else np.subtract, ct, a, scaled)


def _add_fast(sign: int) -> Callable[[Operand, Operand, float, np.ndarray], Callable[[], Any] | None]:
    """The fast path of `_add(…, sign, …)`: its ufunc call bound at load (a scaled number scaled once)."""
    fn = np.add if sign > 0 else np.subtract

    def fast(a: Operand, b: Operand, alpha: float, out: np.ndarray) -> Callable[[], Any] | None:
        if isinstance(b, np.ndarray):
            return prebound(fn, out, a, b, exact=EXACT if sign > 0 else _EXACT_SUB) if alpha == 1 else None
        if alpha == 1 or not isinstance(a, np.ndarray) or out.dtype not in NATIVE:
            return _scalar_bound(fn, a, b, out, False)
        ct = opmath(result_dtype(a, b))
        return _scalar_bound(fn, a, cast(b, ct) * cast(alpha, ct), out, False)

    return fast


@kernel("aten::add.out", dtypes=ALL_DTYPES, fast=_add_fast(1))
@quiet
def add_out(a: np.ndarray, b: np.ndarray, alpha: float, out: np.ndarray) -> np.ndarray:
    return _add(a, b, alpha, 1, out)


@kernel("aten::add.Scalar_out", dtypes=ALL_DTYPES, fast=_add_fast(1))
@quiet
def add_scalar_out(a: np.ndarray, b: float, alpha: float, out: np.ndarray) -> np.ndarray:
    return _add(a, b, alpha, 1, out)


@kernel("aten::sub.out", dtypes=REAL_DTYPES, fast=_add_fast(-1))
@quiet
def sub_out(a: np.ndarray, b: np.ndarray, alpha: float, out: np.ndarray) -> np.ndarray:
    return _add(a, b, alpha, -1, out)


@kernel("aten::sub.Scalar_out", dtypes=REAL_DTYPES, fast=_add_fast(-1))
@quiet
def sub_scalar_out(a: np.ndarray, b: float, alpha: float, out: np.ndarray) -> np.ndarray:
    return _add(a, b, alpha, -1, out)


@kernel("aten::rsub.Tensor_out", dtypes=REAL_DTYPES)
@quiet
def rsub_tensor_out(a: np.ndarray, b: np.ndarray, alpha: float, out: np.ndarray) -> np.ndarray:
    """out = b - alpha * a."""
    return _rsub(a, b, alpha, out)


@kernel("aten::rsub.Scalar_out", dtypes=REAL_DTYPES)
@quiet
def rsub_scalar_out(a: np.ndarray, b: float, alpha: float, out: np.ndarray) -> np.ndarray:
    """out = b - alpha * a."""
    return _rsub(a, b, alpha, out)


def _rsub(a: np.ndarray, b: Operand, alpha: float, out: np.ndarray) -> np.ndarray:
    ct = opmath(result_dtype(a, b))
    scaled = cast(a, ct) if alpha == 1 else cast(a, ct) * cast(alpha, ct)
    return _write(out, np.subtract, ct, b, scaled)


def _trunc_divide(a: np.ndarray, b: np.ndarray, out: np.ndarray, casting: str) -> np.ndarray:
    """Integer division rounding toward zero (C semantics)."""
    q = np.floor_divide(a, b)
    q += (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    np.copyto(out, q, casting=casting)
    return out


def _float_trunc_divide(a: np.ndarray, b: np.ndarray, out: np.ndarray, casting: str) -> np.ndarray:
    return np.trunc(np.true_divide(a, b), out=out, casting=casting)


def _div_mode(a: Operand, b: Operand, mode: str | None, out: np.ndarray) -> np.ndarray:
    dtype = result_dtype(a, b)
    if mode is None:
        return _write(out, np.true_divide, float_dtype(dtype), a, b)
    if mode == "floor":
        return _write(out, np.floor_divide, dtype, a, b)
    if mode == "trunc":
        fn = _float_trunc_divide if dtype.kind == "f" else _trunc_divide
        return _write(out, fn, dtype, a, b)
    raise KernelError(f"div: rounding_mode must be None, 'trunc' or 'floor', not {mode!r}")


@kernel("aten::div.out_mode", dtypes=REAL_DTYPES)
@quiet
def div_out_mode(a: np.ndarray, b: np.ndarray, mode: str | None, out: np.ndarray) -> np.ndarray:
    return _div_mode(a, b, mode, out)


@kernel("aten::div.Scalar_mode_out", dtypes=REAL_DTYPES)
@quiet
def div_scalar_mode_out(a: np.ndarray, b: float, mode: str | None, out: np.ndarray) -> np.ndarray:
    return _div_mode(a, b, mode, out)


def _clamp(x: np.ndarray, lo: Operand, hi: Operand, out: np.ndarray) -> np.ndarray:
    """min(max(x, lo), hi): a NaN input stays NaN; lo > hi gives hi, as in torch."""
    if lo is None and hi is None:
        raise KernelError("clamp: at least one of min and max must be given")
    ct = opmath(result_dtype(x, lo, hi))
    out = resize(out, broadcast_shape(x, lo, hi))
    value = cast(x, ct)
    if lo is not None:
        value = np.maximum(value, cast(lo, ct))
    if hi is not None:
        value = np.minimum(value, cast(hi, ct))
    np.copyto(out, value, casting="unsafe")
    return out


@kernel("aten::clamp.out", dtypes=REAL_DTYPES)
@quiet
def clamp_out(x: np.ndarray, lo: float | None, hi: float | None, out: np.ndarray) -> np.ndarray:
    return _clamp(x, lo, hi, out)


@kernel("aten::clamp.Tensor_out", dtypes=REAL_DTYPES)
@quiet
def clamp_tensor_out(x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None, out: np.ndarray) -> np.ndarray:
    return _clamp(x, lo, hi, out)


@kernel("aten::addcmul.out", dtypes=FLOAT_DTYPES)
@quiet
def addcmul_out(x: np.ndarray, t1: np.ndarray, t2: np.ndarray, value: float, out: np.ndarray) -> np.ndarray:
    """out = x + value * t1 * t2."""
    ct = opmath(result_dtype(x, t1, t2))
    prod = cast(t1, ct) * cast(t2, ct) * cast(value, ct)
    return _write(out, np.add, ct, x, prod)


@kernel("aten::lerp.Scalar_out", dtypes=FLOAT_DTYPES)
@quiet
def lerp_scalar_out(x: np.ndarray, end: np.ndarray, weight: float, out: np.ndarray) -> np.ndarray:
    """out = x + weight * (end - x), evaluated from the nearer end as torch does."""
    ct = opmath(result_dtype(x, end))
    a, b, w = cast(x, ct), cast(end, ct), cast(weight, ct)
    diff = b - a
    value = a + w * diff if abs(weight) < 0.5 else b - diff * (cast(1, ct) - w)
    out = resize(out, broadcast_shape(x, end))
    np.copyto(out, value, casting="unsafe")
    return out
