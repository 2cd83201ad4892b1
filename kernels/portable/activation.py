"""Activations: relu, gelu, sigmoid, hardtanh (ReLU6), silu, leaky_relu, elu, softplus, glu, ...

Each computes in opmath (float16 in float32) and rounds once into `out`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels import native
from etbuild.kernels.numerics.erf import erf, erf32
from etbuild.kernels.portable.common import (
    FLOAT32,
    NATIVE,
    cast,
    float_dtype,
    opmath,
    quiet,
    result_dtype,
    store,
    wrap_dim,
)
from etbuild.runtime.kernel_registry import FLOAT_DTYPES, REAL_DTYPES, kernel
from etbuild.runtime.tensor import resize


def _apply(x: np.ndarray, out: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """out = fn(x) with x in the opmath float dtype (integers compute in float32)."""
    return store(out, fn(cast(x, opmath(float_dtype(x.dtype)))))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _in_place(x: np.ndarray, out: np.ndarray) -> bool:
    """Whether out can serve as the work array: x's shape and dtype, float32 or float64."""
    return out.dtype == x.dtype and out.dtype in NATIVE and out.shape == x.shape


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    bx = x * beta
    return np.where(bx > threshold, x, np.log1p(np.exp(bx)) / beta)


def _relu_fast(x: np.ndarray, out: np.ndarray) -> Callable[[], Any] | None:
    if out.shape != x.shape:
        return None
    return functools.partial(np.maximum, x, x.dtype.type(0), out=out, casting="unsafe")


@kernel("aten::relu.out", dtypes=REAL_DTYPES, fast=_relu_fast)
def relu_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    out = resize(out, x.shape)
    np.maximum(x, x.dtype.type(0), out=out, casting="unsafe")
    return out


def _gelu_fast(x: np.ndarray, approximate: str, out: np.ndarray) -> Callable[[], Any] | None:
    """gelu_out's compiled loop (float32, approximate='none') bound at load."""
    fused = native.loops()
    pair = native.flat_pair(x, out) if approximate == "none" and out.shape == x.shape else None
    return None if fused is None or pair is None else functools.partial(fused.gelu, *pair)


def _gelu_erf(v: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = x·(1 + erf(x/√2))/2, computed in v's dtype; in out itself when it can be; float32 by
    the compiled loop when there is one (kernels/native.py)."""
    if v.dtype == FLOAT32 and (fused := native.loops()) is not None:
        src = np.ascontiguousarray(v)
        pair = native.flat_pair(src, out)
        if pair is None:
            work = np.empty(src.shape, FLOAT32)
            fused.gelu(src.reshape(-1), work.reshape(-1))
            return store(out, work)
        fused.gelu(*pair)
        return out
    work = out if out.dtype == v.dtype and not np.may_share_memory(out, v) else None
    t = np.multiply(v, math.sqrt(0.5), out=work)
    e = erf32(t, t) if t.dtype == FLOAT32 else erf(t)
    e += 1
    e *= 0.5
    return np.multiply(e, v, out=out, casting="unsafe")


def _gelu_tanh(v: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))/2, computed in v's dtype."""
    k = math.sqrt(2 / math.pi)
    t = np.square(v)
    t *= 0.044715
    t += 1
    t *= v
    t *= k
    np.tanh(t, out=t)
    t += 1
    t *= 0.5
    return np.multiply(t, v, out=out, casting="unsafe")


@kernel("aten::gelu.out", dtypes=FLOAT_DTYPES, fast=_gelu_fast)
@quiet
def gelu_out(x: np.ndarray, approximate: str, out: np.ndarray) -> np.ndarray:
    """x·Φ(x) with the exact erf, or the tanh approximation when approximate == 'tanh'."""
    if approximate not in ("none", "tanh"):
        raise KernelError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    out = resize(out, x.shape)
    v = np.atleast_1d(cast(x, opmath(x.dtype)))  # 0-d arrays would compute in numpy scalars
    (_gelu_erf if approximate == "none" else _gelu_tanh)(v, np.atleast_1d(out))
    return out


def _sigmoid_fast(x: np.ndarray, out: np.ndarray) -> Callable[[], Any] | None:
    """sigmoid_out's in-place path, its four ufunc calls bound at load."""
    if not _in_place(x, out):
        return None
    negative, exp, add, reciprocal = np.negative, np.exp, np.add, np.reciprocal
    # A scalar operand costs a small array's ufunc call more than its work: ones of out's shape instead.
    one = np.ones(out.shape, out.dtype) if out.size <= 16384 else out.dtype.type(1)

    def sigmoid() -> None:
        negative(x, out)
        exp(out, out)
        add(out, one, out)
        reciprocal(out, out)

    return sigmoid


@kernel("aten::sigmoid.out", dtypes=REAL_DTYPES, fast=_sigmoid_fast)
@quiet
def sigmoid_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    if not _in_place(x, out):
        return _apply(x, out, _sigmoid)
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


@kernel("aten::silu.out", dtypes=FLOAT_DTYPES)
@quiet
def silu_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _apply(x, out, lambda v: v * _sigmoid(v))


@kernel("aten::hardtanh.out", dtypes=REAL_DTYPES)
def hardtanh_out(x: np.ndarray, lo: float, hi: float, out: np.ndarray) -> np.ndarray:
    """clamp(x, lo, hi) in x's dtype; nn.ReLU6 lowers to hardtanh(x, 0, 6)."""
    if _in_place(x, out):
        return np.clip(x, lo, hi, out=out)
    ct = opmath(x.dtype)
    return store(out, np.minimum(np.maximum(x.astype(ct, copy=False), cast(lo, ct)), cast(hi, ct)))


@kernel("aten::leaky_relu.out", dtypes=FLOAT_DTYPES)
@quiet
def leaky_relu_out(x: np.ndarray, slope: float, out: np.ndarray) -> np.ndarray:
    return _apply(x, out, lambda v: np.where(v > 0, v, v * slope))


@kernel("aten::hardswish.out", dtypes=FLOAT_DTYPES)
@quiet
def hardswish_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """x · relu6(x + 3) / 6."""
    return _apply(x, out, lambda v: v * np.clip(v + 3, 0, 6) / 6)


@kernel("aten::hardsigmoid.out", dtypes=FLOAT_DTYPES)
def hardsigmoid_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """relu6(x + 3) / 6."""
    return _apply(x, out, lambda v: np.clip(v + 3, 0, 6) / 6)


@kernel("aten::elu.out", dtypes=FLOAT_DTYPES)
@quiet
def elu_out(x: np.ndarray, alpha: float, scale: float, input_scale: float, out: np.ndarray) -> np.ndarray:
    """x > 0 ? scale·x : alpha·scale·(exp(input_scale·x) − 1)."""
    return _apply(x, out, lambda v: np.where(v > 0, v * scale, np.expm1(v * input_scale) * (alpha * scale)))


@kernel("aten::celu.out", dtypes=FLOAT_DTYPES)
@quiet
def celu_out(x: np.ndarray, alpha: float, out: np.ndarray) -> np.ndarray:
    return _apply(x, out, lambda v: np.where(v > 0, v, np.expm1(v / alpha) * alpha))


@kernel("aten::softplus.out", dtypes=FLOAT_DTYPES)
@quiet
def softplus_out(x: np.ndarray, beta: float, threshold: float, out: np.ndarray) -> np.ndarray:
    """log(1 + exp(beta·x)) / beta, linear above the threshold."""
    return _apply(x, out, lambda v: _softplus(v, beta, threshold))


@kernel("aten::mish.out", dtypes=FLOAT_DTYPES)
@quiet
def mish_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _apply(x, out, lambda v: v * np.tanh(_softplus(v)))


@kernel("aten::threshold.out", dtypes=REAL_DTYPES)
def threshold_out(x: np.ndarray, threshold: float, value: float, out: np.ndarray) -> np.ndarray:
    """x <= threshold ? value : x, in the promoted dtype of x and both scalars."""
    ct = opmath(result_dtype(x, threshold, value))
    v = cast(x, ct)
    return store(out, np.where(v <= cast(threshold, ct), cast(value, ct), v))


@kernel("aten::logit.out", dtypes=FLOAT_DTYPES)
@quiet
def logit_out(x: np.ndarray, eps: float | None, out: np.ndarray) -> np.ndarray:
    """log(x / (1 − x)), with x clamped to [eps, 1 − eps] when eps is given."""

    def logit(v: np.ndarray) -> np.ndarray:
        if eps is not None:
            v = np.clip(v, eps, 1 - eps)
        return np.log(v / (1 - v))

    return _apply(x, out, logit)


@kernel("aten::glu.out", dtypes=FLOAT_DTYPES)
@quiet
def glu_out(x: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    """a · sigmoid(b) where a, b are the two halves of x along dim."""
    axis = wrap_dim(dim, x.ndim)
    if x.ndim == 0 or x.shape[axis] % 2:
        raise KernelError(f"glu: dim {dim} of shape {list(x.shape)} must have an even size")
    a, b = np.split(cast(x, opmath(x.dtype)), 2, axis=axis)
    return store(out, a * _sigmoid(b))
