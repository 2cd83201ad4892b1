"""Matrix products (mm, bmm, addmm, baddbmm, linear, mv, dot) and pairwise distances.

float16 products accumulate in float32 and round once, as torch's CPU kernels do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.kernels.numerics.blas import bound_product, matmul
from etbuild.kernels.numerics.ufuncs import matmul_add
from etbuild.kernels.portable.common import (
    NATIVE,
    cast,
    opmath,
    promoted,
    quiet,
    result_dtype,
    store,
    vector_norm,
)
from etbuild.runtime.kernel_registry import FLOAT_DTYPES, kernel
from etbuild.runtime.tensor import resize


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """out = a @ b, straight into out when no float16 rounding step is needed."""
    out = resize(out, shape)
    ct = opmath(result_dtype(a, b))
    if out.dtype == ct:
        matmul(cast(a, ct), cast(b, ct), out)
    else:
        np.copyto(out, np.matmul(cast(a, ct), cast(b, ct)), casting="unsafe")
    return out


def _product_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of np.matmul(a, b): 1-d operands lose their vector dim."""
    if len(a) == 1 or len(b) == 1:
        return (*a[:-1], *b[:-2], *b[-1:]) if len(b) > 1 else a[:-1]
    batch = a[:-2] if a[:-2] == b[:-2] else np.broadcast_shapes(a[:-2], b[:-2])
    return (*batch, a[-2], b[-1])


def _scaled_add(
    bias: np.ndarray, a: np.ndarray, b: np.ndarray, beta: float, alpha: float, out: np.ndarray
) -> np.ndarray:
    """out = beta * bias + alpha * (a @ b); beta == 0 ignores bias (even its NaNs).

    The product goes straight into out and the bias is added in place when out has the
    compute dtype; otherwise the sum is rounded into out once.
    """
    shape = _product_shape(a.shape, b.shape)
    if out.shape != shape:
        out = resize(out, shape)
    same = a.dtype == b.dtype == bias.dtype == out.dtype and out.dtype in NATIVE  # the common case
    ct = out.dtype if same else promoted(bias, a, b)
    in_place = out.dtype == ct and not (beta != 0 and np.may_share_memory(out, bias))
    value = out if in_place else np.empty(shape, ct)
    if same:  # every operand already has ct: no casts to make (cast would return each as is)
        matmul(a, b, value)
    else:
        matmul(cast(a, ct), cast(b, ct), value)
    if alpha != 1:
        value *= cast(alpha, ct)
    if beta != 0:
        value += (bias if same else cast(bias, ct)) if beta == 1 else cast(bias, ct) * cast(beta, ct)
    return out if value is out else store(out, value)


def _same_native(out: np.ndarray, *operands: np.ndarray) -> bool:
    """Every operand has out's dtype, float32 or float64: the kernels' cast-free path."""
    return out.dtype in NATIVE and all(x.dtype == out.dtype for x in operands)


def _matmul_fast(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any] | None:
    """`_matmul`'s one np.matmul call, bound at load (out already has the product's shape)."""
    if not _same_native(out, a, b) or out.shape != _product_shape(a.shape, b.shape):
        return None
    return bound_product(np.matmul, a, b, out)


def _scaled_add_fast(
    bias: np.ndarray, a: np.ndarray, b: np.ndarray, beta: float, alpha: float, out: np.ndarray
) -> Callable[[], Any] | None:
    """`_scaled_add`'s in-place path for alpha 1 and beta 0 or 1 (its matmul, then += bias), bound at load."""
    product = _matmul_fast(a, b, out)
    if product is None or alpha != 1 or beta not in (0, 1) or bias.dtype != out.dtype:
        return None
    if beta == 0:
        return product
    if np.may_share_memory(out, bias):
        return None
    return matmul_add(np.matmul, a, b, bias, out)


@kernel("aten::mm.out", dtypes=FLOAT_DTYPES, fast=_matmul_fast)
def mm_out(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _matmul(a, b, out, (a.shape[0], b.shape[1]))


@kernel("aten::bmm.out", dtypes=FLOAT_DTYPES, fast=_matmul_fast)
def bmm_out(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _matmul(a, b, out, (a.shape[0], a.shape[1], b.shape[2]))


@kernel("aten::mv.out", dtypes=FLOAT_DTYPES)
def mv_out(a: np.ndarray, v: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _matmul(a, v, out, (a.shape[0],))


@kernel("aten::dot.out", dtypes=FLOAT_DTYPES)
def dot_out(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _matmul(a, b, out, ())


@kernel("aten::addmm.out", dtypes=FLOAT_DTYPES, fast=_scaled_add_fast)
def addmm_out(bias: np.ndarray, a: np.ndarray, b: np.ndarray, beta: float, alpha: float, out: np.ndarray) -> np.ndarray:
    """out = beta * bias + alpha * (a @ b); bias broadcasts over the rows."""
    return _scaled_add(bias, a, b, beta, alpha, out)


@kernel("aten::baddbmm.out", dtypes=FLOAT_DTYPES, fast=_scaled_add_fast)
def baddbmm_out(
    bias: np.ndarray, a: np.ndarray, b: np.ndarray, beta: float, alpha: float, out: np.ndarray
) -> np.ndarray:
    """out = beta * bias + alpha * (a @ b) per batch."""
    return _scaled_add(bias, a, b, beta, alpha, out)


def _linear_fast(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, out: np.ndarray
) -> Callable[[], Any] | None:
    if bias is None:
        return _matmul_fast(x, weight.T, out)
    return _scaled_add_fast(bias, x, weight.T, 1, 1, out)


@kernel("aten::linear.out", dtypes=FLOAT_DTYPES, fast=_linear_fast)
def linear_out(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, out: np.ndarray) -> np.ndarray:
    """out = x @ weight.T + bias over the last dim of x (any leading dims)."""
    if bias is None:
        return _matmul(x, weight.T, out, (*x.shape[:-1], weight.shape[0]))
    return _scaled_add(bias, x, weight.T, 1, 1, out)


@kernel("aten::_cdist_forward.out", dtypes=("float32", "float64"))
@quiet
def cdist_forward_out(
    x1: np.ndarray, x2: np.ndarray, p: float, compute_mode: int | None, out: np.ndarray
) -> np.ndarray:
    """p-norm distances between the rows of x1 (..., P, M) and x2 (..., R, M): (..., P, R)."""
    ct = opmath(result_dtype(x1, x2))
    diff = cast(x1, ct)[..., :, None, :] - cast(x2, ct)[..., None, :, :]
    return store(out, vector_norm(diff, float(p), (-1,), False))


@kernel("aten::_pdist_forward.out", dtypes=("float32", "float64"))
@quiet
def pdist_forward_out(x: np.ndarray, p: float, out: np.ndarray) -> np.ndarray:
    """p-norm distances between rows i < j of x (N, M), in row-major pair order."""
    i, j = np.triu_indices(x.shape[0], 1)
    v = cast(x, opmath(x.dtype))
    return store(out, vector_norm(v[i] - v[j], float(p), (-1,), False))
