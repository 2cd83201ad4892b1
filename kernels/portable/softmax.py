"""Softmax and log-softmax along one dim, max-shifted, computed in opmath.

`half_to_float` asks for a float32 result from float16 input; the out dtype already says so.
"""

from __future__ import annotations

import numpy as np

from etbuild.kernels.portable.common import cast, opmath, quiet, store, wrap_dim
from etbuild.kernels.registry import FLOAT_DTYPES, kernel


def _shifted(x: np.ndarray, dim: int) -> tuple[np.ndarray, int]:
    """x - max(x) along dim (in opmath), and the axis; a 0-d x is its own row."""
    v = cast(x, opmath(x.dtype))
    if v.ndim == 0:
        v = v.reshape(1)
    axis = wrap_dim(dim, x.ndim)
    if v.size == 0:
        return v, axis
    return v - np.max(v, axis=axis, keepdims=True), axis


@kernel("aten::_softmax.out", dtypes=FLOAT_DTYPES)
@quiet
def softmax_out(x: np.ndarray, dim: int, half_to_float: bool, out: np.ndarray) -> np.ndarray:
    v, axis = _shifted(x, dim)
    e = np.exp(v)
    return store(out, (e / np.sum(e, axis=axis, keepdims=True)).reshape(x.shape))


@kernel("aten::_log_softmax.out", dtypes=FLOAT_DTYPES)
@quiet
def log_softmax_out(x: np.ndarray, dim: int, half_to_float: bool, out: np.ndarray) -> np.ndarray:
    v, axis = _shifted(x, dim)
    value = v - np.log(np.sum(np.exp(v), axis=axis, keepdims=True))
    return store(out, value.reshape(x.shape))
