"""Normalizations: native_layer_norm, native_group_norm, batch norm in inference mode.

Each returns its three outs: the normalized tensor, then the mean and the reciprocal standard
deviation (batch norm's saved statistics are empty in inference, as in torch).
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import cast, opmath, quiet, store
from etbuild.kernels.registry import FLOAT_DTYPES, kernel
from etbuild.runtime.tensor import resize

Outs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _affine(y: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """y * weight + bias with both reshaped to broadcast as `shape`."""
    if weight is not None:
        y = y * cast(weight, y.dtype).reshape(shape)
    if bias is not None:
        y = y + cast(bias, y.dtype).reshape(shape)
    return y


def _moments(v: np.ndarray, axes: tuple[int, ...], eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and 1/sqrt(biased var + eps) over axes, kept as size-1 dims."""
    mean = np.mean(v, axis=axes, keepdims=True)
    var = np.mean(np.square(v - mean), axis=axes, keepdims=True)
    return mean, 1 / np.sqrt(var + cast(eps, v.dtype))


@kernel("aten::native_layer_norm.out", dtypes=FLOAT_DTYPES)
@quiet
def native_layer_norm_out(
    x: np.ndarray,
    normalized_shape: list[int],
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    eps: float,
    out: np.ndarray,
    mean_out: np.ndarray,
    rstd_out: np.ndarray,
) -> Outs:
    """Normalize over the trailing `normalized_shape` dims; mean/rstd keep them as size 1."""
    k = len(normalized_shape)
    if k > x.ndim or list(x.shape[x.ndim - k :]) != list(normalized_shape):
        raise KernelError(f"layer_norm: shape {normalized_shape} does not end {list(x.shape)}")
    v = cast(x, opmath(x.dtype))
    axes = tuple(range(x.ndim - k, x.ndim))
    mean, rstd = _moments(v, axes, eps)
    y = _affine((v - mean) * rstd, weight, bias, tuple(normalized_shape))
    return store(out, y), store(mean_out, mean), store(rstd_out, rstd)


@kernel("aten::_native_batch_norm_legit_no_training.out", dtypes=FLOAT_DTYPES)
@quiet
def native_batch_norm_legit_no_training_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    running_mean: np.ndarray,
    running_var: np.ndarray,
    momentum: float,
    eps: float,
    out: np.ndarray,
    save_mean: np.ndarray,
    save_invstd: np.ndarray,
) -> Outs:
    """(x - running_mean) / sqrt(running_var + eps) * weight + bias over dim 1."""
    v = cast(x, opmath(x.dtype))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = cast(running_mean, v.dtype).reshape(shape)
    invstd = 1 / np.sqrt(cast(running_var, v.dtype).reshape(shape) + cast(eps, v.dtype))
    y = _affine((v - mean) * invstd, weight, bias, shape)
    return store(out, y), resize(save_mean, (0,)), resize(save_invstd, (0,))


@kernel("aten::native_group_norm.out", dtypes=FLOAT_DTYPES)
@quiet
def native_group_norm_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    n: int,
    c: int,
    hxw: int,
    group: int,
    eps: float,
    out: np.ndarray,
    mean_out: np.ndarray,
    rstd_out: np.ndarray,
) -> Outs:
    """Normalize each of `group` channel groups per sample; mean/rstd are (N, group)."""
    if c % group:
        raise KernelError(f"group_norm: {c} channels do not split into {group} groups")
    v = cast(x, opmath(x.dtype)).reshape(n, group, -1)
    mean, rstd = _moments(v, (2,), eps)
    y = ((v - mean) * rstd).reshape(x.shape)
    y = _affine(y, weight, bias, (1, c) + (1,) * (x.ndim - 2))
    return store(out, y), store(mean_out, mean.reshape(n, group)), store(rstd_out, rstd.reshape(n, group))
