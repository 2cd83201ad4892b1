"""Ufuncs bound once to their operands and output: the calls a load-time fast path makes per run."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.kernels.numerics.blas import bound_product

# numpy 2.4 deprecates a positional out for these two (it reads a third operand as a mistake).
_OUT_BY_KEYWORD = frozenset({np.maximum, np.minimum})


def bound_ufunc(fn: np.ufunc, *operands: Any, out: np.ndarray) -> Callable[[], Any]:
    """fn(*operands) into out, bound once: out passed positionally where numpy allows it (the `out=`
    keyword costs about as much as adding two small vectors)."""
    if fn in _OUT_BY_KEYWORD:
        return functools.partial(fn, *operands, out=out)
    return functools.partial(fn, *operands, out)


EXACT_UFUNCS = frozenset({
    np.add, np.subtract, np.multiply, np.true_divide, np.maximum, np.minimum, np.fmax, np.fmin,
    np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
    np.logical_and, np.logical_or, np.logical_xor, np.bitwise_and, np.bitwise_or, np.bitwise_xor,
})
"""Ufuncs correctly rounded element by element: the result does not depend on the loop numpy picks, so
an operand may be reshaped to out's shape (a broadcast over unit dims costs numpy more than the op)."""


def as_out_shape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """x as a view of out's shape when broadcasting it only adds or drops unit dims; else x."""
    if x.shape == shape or x.size != math.prod(shape):
        return x
    view = x.reshape(shape)
    return view if np.may_share_memory(view, x) else x  # a reshape that had to copy would go stale


BIAS_ROW = 8192  # elements of a tiled bias row: long inner loops, small enough to stay in cache


def bias_rows(bias: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """out as rows of k of its [N] rows and a constant bias [N] tiled k times to match, k the largest divisor of
    out's row count with k·N ≤ BIAS_ROW: numpy then adds along rows of thousands of elements instead of N (for
    N ≤ ~100 and many rows, twice as fast), with the same sums. (out, bias) as given when out is not a C-contiguous
    array of [N] rows or no k > 1 fits. The tiled bias is a copy: only for biases constant for the binding's life."""
    n = bias.shape[0] if bias.ndim == 1 else 0
    if not n or not out.size or out.shape[-1] != n or not out.flags.c_contiguous:
        return out, bias
    rows = out.size // n
    k = next(d for d in range(min(rows, max(1, BIAS_ROW // n)), 0, -1) if rows % d == 0)
    if k == 1:
        return out, bias
    view = out.view()
    view.shape = (rows // k, k * n)
    return view, np.tile(bias, k)


def matmul_add(
    product: Callable[..., Any], a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
    constant_bias: bool = False,
) -> Callable[[], Any]:
    """out = product(a, b) (np.matmul or np.dot, or MKL's sgemm where `blas.bound_product` takes the product),
    then out += bias when there is one, bound once; bias is bound as a view of out's shape where it can be
    (broadcasting over unit dims costs more than the add), or, when the caller says it is constant, tiled along
    longer rows of out (`bias_rows`)."""
    multiply = bound_product(product, a, b, out)
    if bias is None:
        return multiply
    rows, bias = bias_rows(bias, out) if constant_bias else (out, bias)
    add, bias = np.add, as_out_shape(bias, rows.shape)

    def product_add() -> None:
        multiply()
        add(rows, bias, rows)

    return product_add
