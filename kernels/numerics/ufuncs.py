"""Ufuncs bound once to their operands and output: the calls a load-time fast path makes per run."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

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


def matmul_add(
    product: Callable[..., Any], a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, out: np.ndarray
) -> Callable[[], Any]:
    """out = product(a, b) (np.matmul or np.dot), then out += bias when there is one, bound once; bias is
    bound as a view of out's shape where it can be (broadcasting over unit dims costs more than the add)."""
    if bias is None:
        return functools.partial(product, a, b, out)
    add, bias = np.add, as_out_shape(bias, out.shape)

    def product_add() -> None:
        product(a, b, out)
        add(out, bias, out)

    return product_add
