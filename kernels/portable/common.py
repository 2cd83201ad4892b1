"""Helpers shared by the portable kernel families: torch type promotion, dims, output writes.

Not a family: it registers nothing. Kernels follow PyTorch's promotion rules (not numpy's):
a float of any width beats every integer, and among the operands, dimensioned tensors
outrank 0-d tensors, which outrank Python scalars, unless a lower rank brings a higher
category (bool < integer < float).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from etbuild.errors import KernelError
from etbuild.runtime.tensor import resize

Operand = np.ndarray | bool | int | float | None

FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
INT64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)

quiet = np.errstate(all="ignore")
"""Decorator/context: IEEE special cases (x/0, log(-1), overflow) are results, not warnings."""


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """torch.promote_types for the dtypes numpy can hold: int + float16 is float16."""
    if a == b:
        return a
    if a.kind == "f" or b.kind == "f":
        if a.kind != "f":
            return b
        if b.kind != "f":
            return a
        return a if a.itemsize >= b.itemsize else b
    if a.kind == "b":
        return b
    if b.kind == "b":
        return a
    return np.promote_types(a, b)


def _promote_opt(a: np.dtype | None, b: np.dtype | None) -> np.dtype | None:
    if a is None:
        return b
    if b is None:
        return a
    return promote_types(a, b)


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    """A higher-priority operand group keeps its dtype unless the lower one has a higher category."""
    if higher is None or lower is None:
        return higher if lower is None else lower
    if higher.kind == "f":
        return higher
    if higher.kind == "b" or lower.kind == "f":
        return promote_types(higher, lower)
    return higher


def scalar_dtype(value: bool | int | float) -> np.dtype:
    """The dtype a wrapped Python scalar takes part in promotion with (default float32)."""
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return INT64
    return FLOAT32


def result_dtype(*operands: Operand) -> np.dtype:
    """torch.result_type over arrays and Python scalars; None operands are skipped."""
    dim = zero = wrapped = None
    for x in operands:
        if x is None:
            continue
        if isinstance(x, np.ndarray):
            if x.ndim:
                dim = _promote_opt(dim, x.dtype)
            else:
                zero = _promote_opt(zero, x.dtype)
        else:
            wrapped = _promote_opt(wrapped, scalar_dtype(x))
    result = _combine(dim, _combine(zero, wrapped))
    if result is None:
        raise KernelError("no operand to infer a result dtype from")
    return result


def float_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of a float-valued op (sqrt, div): integers and bool become float32."""
    return dtype if dtype.kind == "f" else FLOAT32


def opmath(dtype: np.dtype) -> np.dtype:
    """The dtype to compute in: float16 is computed in float32 and rounded once, like torch."""
    return FLOAT32 if dtype == np.float16 else dtype


def cast(x: Operand, dtype: np.dtype) -> np.ndarray:
    """x as an array of dtype, without a copy when it already is one; scalars wrap like C."""
    if isinstance(x, np.ndarray):
        return x.astype(dtype, copy=False)
    return np.asarray(x).astype(dtype)


def store(out: np.ndarray, value: np.ndarray | Any) -> np.ndarray:
    """Resize out to value's shape, copy value in (casting to out's dtype) and return out."""
    out = resize(out, np.shape(value))
    np.copyto(out, value, casting="unsafe")
    return out


def broadcast_shape(*operands: Operand) -> tuple[int, ...]:
    """The broadcast shape of the array operands (scalars and None take no part)."""
    shapes = [x.shape for x in operands if isinstance(x, np.ndarray)]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise KernelError(f"shapes {[list(s) for s in shapes]} do not broadcast") from None


def wrap_dim(dim: int, ndim: int) -> int:
    """A dim in [-ndim, ndim) as a non-negative index; a 0-d tensor accepts 0 and -1."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise KernelError(f"dim {dim} is out of range for a {ndim}-d tensor")
    return dim % n


def reduce_axes(dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """The axes a reduction covers: None or [] means all of them, as in torch."""
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if not dims:
        return tuple(range(ndim))
    axes = sorted({wrap_dim(d, ndim) for d in dims})
    return tuple(axes) if ndim else ()


def named(fn: Callable[..., Any], name: str, module: str) -> Callable[..., Any]:
    """Give a factory-made kernel the Python name of its operator and its family's module."""
    base, _, overload = name.split("::")[1].partition(".")
    fn.__name__ = fn.__qualname__ = f"{base}_{overload}".replace(".", "_") if overload else base
    fn.__module__ = module
    return fn


def per_dim(values: Sequence[int], n: int, what: str) -> list[int]:
    """A per-spatial-dim list: one value repeats for every dim."""
    if len(values) == 1:
        return list(values) * n
    if len(values) != n:
        raise KernelError(f"{what} {list(values)} does not fit {n} spatial dims")
    return list(values)


def pad_spatial(x: np.ndarray, pads: Sequence[tuple[int, int]], value: float = 0) -> np.ndarray:
    """Pad (or, for negative amounts, crop) the trailing spatial dims of x."""
    if not any(lo or hi for lo, hi in pads):
        return x
    lead = [(0, 0)] * (x.ndim - len(pads))
    grown = np.pad(x, lead + [(max(lo, 0), max(hi, 0)) for lo, hi in pads], constant_values=value)
    crop = tuple(
        slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip([(0, 0)] * len(lead) + list(pads), grown.shape)
    )
    return grown[crop]


def windows(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> np.ndarray:
    """A read-only view (*lead, *out, *kernel) of x (*lead, *spatial), sliding without copy."""
    nsp = len(kernel)
    lead, spatial = x.shape[:-nsp], x.shape[-nsp:]
    out = [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(spatial, kernel, stride, dilation)]
    if min(out, default=1) < 0:
        raise KernelError(f"window {list(kernel)} (dilation {list(dilation)}) exceeds input {list(spatial)}")
    sp_strides = x.strides[-nsp:]
    shape = (*lead, *out, *kernel)
    strides = (
        *x.strides[:-nsp],
        *(st * s for st, s in zip(stride, sp_strides)),
        *(d * s for d, s in zip(dilation, sp_strides)),
    )
    return as_strided(x, shape, strides, writeable=False)


def vector_norm(v: np.ndarray, p: float, axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
    """(Σ|v|^p)^(1/p) over axes; p inf/-inf are max/min |v|, p 0 counts non-zeros."""
    a = np.abs(v)
    if p == np.inf:
        return np.max(a, axis=axes, keepdims=keepdim, initial=0)
    if p == -np.inf:
        return np.min(a, axis=axes, keepdims=keepdim)
    if p == 0:
        return np.sum(a != 0, axis=axes, keepdims=keepdim).astype(v.dtype)
    if p == 2:
        return np.sqrt(np.sum(a * a, axis=axes, keepdims=keepdim))
    return np.sum(a**p, axis=axes, keepdims=keepdim) ** (1.0 / p)


_SQRT_PI = math.sqrt(math.pi)


def _erf_series(a: np.ndarray) -> np.ndarray:
    """erf for 0 <= a < 3: exp(-a²)·Σ 2ⁿa²ⁿ⁺¹/(1·3···(2n+1)), all terms positive."""
    a2 = 2.0 * a * a
    term = a.copy()
    total = a.copy()
    for n in range(1, 70):
        term *= a2 / (2 * n + 1)
        total += term
    return 2.0 / _SQRT_PI * np.exp(-a * a) * total


def _erfc_fraction(a: np.ndarray) -> np.ndarray:
    """erfc for a >= 3 by its continued fraction, evaluated bottom-up at a fixed depth."""
    t = a.copy()
    for k in range(60, 0, -1):
        t = a + (k / 2.0) / t
    return np.exp(-a * a) / (_SQRT_PI * t)


@quiet
def erf(x: np.ndarray) -> np.ndarray:
    """The error function in float64 (numpy has none), accurate to a few ulp."""
    x = np.asarray(x, dtype=FLOAT64)
    a = np.abs(x)
    small = a < 3.0
    result = np.empty_like(a)
    result[small] = _erf_series(a[small])
    result[~small] = 1.0 - _erfc_fraction(a[~small])
    return np.copysign(result, x)
