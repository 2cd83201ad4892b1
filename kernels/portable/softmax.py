"""Softmax and log-softmax along one dim, max-shifted, computed in opmath.

`half_to_float` asks for a float32 result from float16 input; the out dtype already says so.
"""

from __future__ import annotations

import numpy as np

from etbuild.kernels.portable.common import cast, opmath, quiet, store, wrap_dim
from etbuild.runtime.kernel_registry import FLOAT_DTYPES, kernel
from etbuild.runtime.tensor import resize


def _shifted(x: np.ndarray, dim: int, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """x − max(x) along dim in a work array of the compute dtype, out resized, and the axis.

    The work array is out itself (as 1-d when 0-d) when out has the compute dtype; else a
    new one that the caller rounds into out.
    """
    ct = opmath(x.dtype)
    out = resize(out, x.shape)
    axis = wrap_dim(dim, x.ndim)
    v = cast(np.atleast_1d(x), ct)
    work = np.atleast_1d(out) if out.dtype == ct else np.empty(v.shape, ct)
    if v.size:
        np.subtract(v, np.max(v, axis=axis, keepdims=True), out=work)
    return work, out, axis


@kernel("aten::_softmax.out", dtypes=FLOAT_DTYPES)
@quiet
def softmax_out(x: np.ndarray, dim: int, half_to_float: bool, out: np.ndarray) -> np.ndarray:
    """exp(x − max) / Σ exp(x − max), computed in place in out when it can."""
    work, out, axis = _shifted(x, dim, out)
    np.exp(work, out=work)
    work /= np.sum(work, axis=axis, keepdims=True)
    return out if work.dtype == out.dtype else store(out, work.reshape(x.shape))


@kernel("aten::_log_softmax.out", dtypes=FLOAT_DTYPES)
@quiet
def log_softmax_out(x: np.ndarray, dim: int, half_to_float: bool, out: np.ndarray) -> np.ndarray:
    """(x − max) − log Σ exp(x − max)."""
    work, out, axis = _shifted(x, dim, out)
    work -= np.log(np.sum(np.exp(work), axis=axis, keepdims=True))
    return out if work.dtype == out.dtype else store(out, work.reshape(x.shape))
