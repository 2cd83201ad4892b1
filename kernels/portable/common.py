"""Helpers shared by the portable kernel families: torch type promotion, dims, output writes.

Not a family: it registers nothing. Kernels follow PyTorch's promotion rules (not numpy's):
a float of any width beats every integer, and among the operands, dimensioned tensors
outrank 0-d tensors, which outrank Python scalars, unless a lower rank brings a higher
category (bool < integer < float).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.numerics.ufuncs import EXACT_UFUNCS, as_out_shape, bound_ufunc
from etbuild.runtime import features
from etbuild.runtime.tensor import resize

Operand = np.ndarray | bool | int | float | None

FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
FLOAT16 = np.dtype(np.float16)
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


def promoted(*operands: Operand) -> np.dtype:
    """The dtype a call whose operands are not all float32 or all float64 computes in.

    Only fast paths' fallbacks call it: a trimmed runtime built without DTYPE_PROMOTION
    (every call's tensors one native float dtype) drops the promotion rules.
    """
    if not features.DTYPE_PROMOTION:
        dtypes = ", ".join(str(np.result_type(x)) for x in operands)
        raise features.missing("DTYPE_PROMOTION", f"a kernel call with operands of dtypes {dtypes}")
    return opmath(result_dtype(*operands))


def cast(x: Operand, dtype: np.dtype) -> np.ndarray:
    """x as an array of dtype, without a copy when it already is one; scalars wrap like C."""
    if isinstance(x, np.ndarray):
        return x.astype(dtype, copy=False)
    return np.asarray(x).astype(dtype)


def store(out: np.ndarray, value: np.ndarray | Any) -> np.ndarray:
    """Resize out to value's shape, copy value in (casting to out's dtype) and return out."""
    shape = value.shape if isinstance(value, np.ndarray) else np.shape(value)
    if out.shape != shape:
        out = resize(out, shape)
    np.copyto(out, value, casting="unsafe")
    return out


NATIVE = (FLOAT32, FLOAT64)
"""The dtypes numpy computes in exactly as torch does (float16 computes in float32 in torch)."""
EXACT = NATIVE + tuple(np.dtype(t) for t in ("int64", "int32", "int16", "int8", "uint8", "bool"))
"""The dtypes whose torch opmath is the dtype itself: every one but float16 (see `opmath`)."""


def fit(out: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """resize(out, shape) without its cost when out already has that shape (a tuple of ints)."""
    return out if out.shape == shape else resize(out, shape)


def direct(
    fn: Callable[..., Any], out: np.ndarray, *operands: Operand, exact: tuple[np.dtype, ...] = NATIVE
) -> np.ndarray | None:
    """out = fn(*operands) in one call, when every operand is an array of out's dtype (one of
    `exact`, float32 or float64 unless told) and the result has out's shape; None (nothing
    written) otherwise.

    The common case of elementwise kernels: no promotion, no cast, no temporary. A kernel
    passes a wider `exact` only when its general path computes in the operands' own dtype
    for every one of those dtypes, with the same fn.
    """
    dtype, shape = out.dtype, out.shape
    if dtype not in exact:
        return None
    fits = False
    for x in operands:
        if not isinstance(x, np.ndarray) or x.dtype != dtype:
            return None
        fits = fits or x.shape == shape
    if not fits:
        return None
    try:
        fn(*operands, out=out, casting="unsafe")
    except ValueError:  # another operand has more elements than out: the general path resizes
        return None
    return out


def prebound(
    fn: Callable[..., Any], out: np.ndarray, *operands: Operand, exact: tuple[np.dtype, ...] = NATIVE
) -> Callable[[], Any] | None:
    """At load: `fn(*operands, out=out)` bound once, when `direct` would take its one-call path
    with these arrays on every call (their shapes and dtypes are fixed); None otherwise."""
    if out.dtype not in exact or type(out) is not np.ndarray:
        return None
    if not all(isinstance(x, np.ndarray) and x.dtype == out.dtype for x in operands):
        return None
    shapes = [x.shape for x in operands]  # type: ignore[union-attr]
    if out.shape not in shapes:
        return None
    try:
        if np.broadcast_shapes(*shapes) != out.shape:
            return None
    except ValueError:
        return None
    if not isinstance(fn, np.ufunc):  # a function shaped like one (rsqrt, erf): keyword arguments
        return functools.partial(fn, *operands, out=out, casting="unsafe")
    if fn in EXACT_UFUNCS:
        operands = tuple(as_out_shape(x, out.shape) for x in operands)  # type: ignore[arg-type]
    return bound_ufunc(fn, *operands, out=out)  # every operand has out's dtype: no casting to ask for


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
    if type(dim) is list and len(dim) == 1:  # the common case, without the set and the sort
        axis = wrap_dim(dim[0], ndim)
        return (axis,) if ndim else ()
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if not dims:
        return tuple(range(ndim))
    axes = sorted({wrap_dim(d, ndim) for d in dims})
    return tuple(axes) if ndim else ()


# The operands of a binary operator's overloads (the annotations of its kernel's `a` and `b`).
TENSORS = ("np.ndarray", "np.ndarray")  # Tensor self, Tensor other
TENSOR_SCALAR = ("np.ndarray", "Scalar")  # Tensor self, Scalar other
SCALAR_TENSOR = ("Scalar", "np.ndarray")  # Scalar self, Tensor other (pow.Scalar_out)


def named(
    fn: Callable[..., Any], name: str, module: str, operands: tuple[str, str] | None = None
) -> Callable[..., Any]:
    """Give a factory-made kernel the Python name of its operator and its family's module.

    operands: for a binary kernel shared by an operator's Tensor and Scalar overloads, the
    annotations of its `a` and `b` in this overload (the runtime checks arguments by them).
    """
    base, _, overload = name.split("::")[1].partition(".")
    fn.__name__ = fn.__qualname__ = f"{base}_{overload}".replace(".", "_") if overload else base
    fn.__module__ = module
    if operands is not None:
        fn.__annotations__ = {**fn.__annotations__, "a": operands[0], "b": operands[1]}
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
    nsp = len(pads)
    lead = x.shape[: x.ndim - nsp]
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    grown = np.full((*lead, *(n + lo + hi for n, (lo, hi) in zip(x.shape[x.ndim - nsp :], grow))), value, x.dtype)
    grown[(..., *(slice(lo, lo + n) for n, (lo, _) in zip(x.shape[x.ndim - nsp :], grow)))] = x
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(pads, grown.shape[x.ndim - nsp :]))
    return grown[(..., *crop)]


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
