"""Normalizations: native_layer_norm, native_group_norm, batch norm (inference and training).

Each returns its three outs: the normalized tensor, then the mean and the reciprocal standard
deviation (batch norm's saved statistics are empty in inference, as in torch). Training-mode
batch norm also updates the running statistics in place (the variance unbiased).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels import native
from etbuild.kernels.portable.common import FLOAT32, NATIVE, cast, opmath, quiet, store
from etbuild.runtime.kernel_registry import FLOAT_DTYPES, PositiveInt, kernel
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


def _work(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The array to compute x's normalized values in: out itself (already resized to x's
    shape) when it has the compute dtype, so no rounding step is needed; else a new one."""
    ct = opmath(x.dtype)
    return out if out.dtype == ct else np.empty(x.shape, ct)


def _finish(y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out holding y: nothing to do when y is out, else one rounding copy."""
    return out if y is out else store(out, y)


def _affine_vector(a: np.ndarray | None, size: int, fill: float) -> np.ndarray:
    """A layer norm's weight or bias as a contiguous float32 vector (a view when it is one); fill when absent."""
    return np.full(size, fill, np.float32) if a is None else np.ascontiguousarray(cast(a, FLOAT32)).reshape(size)


def _native_layer_norm(
    x: np.ndarray, k: int, weight: np.ndarray | None, bias: np.ndarray | None, eps: float, out: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(normalized, mean, rstd) of float32 x by the compiled loop, the normalized values in out when it can
    hold them (float32, contiguous, not x's memory); None without the loop or for an empty x."""
    fused = native.loops()
    if fused is None or x.dtype != FLOAT32 or x.size == 0:
        return None
    count = math.prod(x.shape[x.ndim - k :])
    rows = x.size // count
    y = out if out.dtype == FLOAT32 and out.flags.c_contiguous and not np.may_share_memory(x, out) else None
    y = np.empty(x.shape, FLOAT32) if y is None else y
    mean, rstd = np.empty(rows, FLOAT32), np.empty(rows, FLOAT32)
    fused.layer_norm(
        np.ascontiguousarray(x).reshape(rows, count), _affine_vector(weight, count, 1.0),
        _affine_vector(bias, count, 0.0), np.float32(eps), y.reshape(rows, count), mean, rstd,
    )
    stats = x.shape[: x.ndim - k] + (1,) * k
    return y, mean.reshape(stats), rstd.reshape(stats)


def _layer_norm_fast(
    x: np.ndarray, normalized_shape: list[int], weight: np.ndarray | None, bias: np.ndarray | None, eps: float,
    out: np.ndarray, mean_out: np.ndarray, rstd_out: np.ndarray,
) -> Callable[[], Any] | None:
    """native_layer_norm_out's work bound at load, for contiguous float32/float64 tensors of one dtype whose
    outs already have their shapes: for float32 the kernel's compiled loop when there is one, else its numpy
    calls with mean and rstd computed in their outs, the square in a buffer of its own (np.mean is
    np.add.reduce then a division by the count: the same calls, so the same bits)."""
    k, ct = len(normalized_shape), x.dtype
    if ct not in NATIVE or k == 0 or k > x.ndim or list(x.shape[x.ndim - k :]) != list(normalized_shape):
        return None
    stats = x.shape[: x.ndim - k] + (1,) * k
    arrays = [out, mean_out, rstd_out, *(a for a in (weight, bias) if a is not None)]
    if any(type(a) is not np.ndarray or a.dtype != ct or not a.flags.c_contiguous for a in (x, *arrays)):
        return None  # (a reduction's summation order follows the memory layout)
    if out.shape != x.shape or mean_out.shape != stats or rstd_out.shape != stats or np.may_share_memory(x, out):
        return None
    count = math.prod(normalized_shape)
    fused = native.loops() if ct == FLOAT32 and x.size else None
    if fused is not None:  # the kernel's own loop (see _native_layer_norm), its arguments bound once
        rows = x.size // count
        args = (x.reshape(rows, count), _affine_vector(weight, count, 1.0), _affine_vector(bias, count, 0.0),
                np.float32(eps), out.reshape(rows, count), mean_out.reshape(rows), rstd_out.reshape(rows))
        return lambda: fused.layer_norm(*args)
    axes, square = tuple(range(x.ndim - k, x.ndim)), np.empty(x.shape, ct)
    eps_c = cast(eps, ct)
    w = None if weight is None else weight.reshape(normalized_shape)
    b = None if bias is None else bias.reshape(normalized_shape)
    reduce, divide, subtract, mul = np.add.reduce, np.true_divide, np.subtract, np.multiply

    def layer_norm() -> None:
        reduce(x, axes, ct, mean_out, True)
        divide(mean_out, count, mean_out)
        subtract(x, mean_out, out)
        np.square(out, square)
        reduce(square, axes, None, rstd_out, True)
        divide(rstd_out, count, rstd_out)
        np.add(rstd_out, eps_c, rstd_out)
        np.sqrt(rstd_out, rstd_out)
        np.reciprocal(rstd_out, rstd_out)
        mul(out, rstd_out, out)
        if w is not None:
            mul(out, w, out)
        if b is not None:
            np.add(out, b, out)

    return layer_norm


@kernel("aten::native_layer_norm.out", dtypes=FLOAT_DTYPES, fast=_layer_norm_fast)
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalize over the trailing `normalized_shape` dims; mean/rstd keep them as size 1.

    Computed in place in the result: x − mean, then its mean square, then the scaling.
    """
    k = len(normalized_shape)
    if k > x.ndim or list(x.shape[x.ndim - k :]) != list(normalized_shape):
        raise KernelError(f"layer_norm: shape {normalized_shape} does not end {list(x.shape)}")
    out = resize(out, x.shape)
    if (done := _native_layer_norm(x, k, weight, bias, eps, out)) is not None:
        y, mean, rstd = done
        return _finish(y, out), store(mean_out, mean), store(rstd_out, rstd)
    y = _work(x, out)
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True, dtype=y.dtype)
    np.subtract(x, mean, out=y)
    var = np.mean(np.square(y), axis=axes, keepdims=True)
    rstd = np.reciprocal(np.sqrt(var + cast(eps, y.dtype), out=var), out=var)
    y *= rstd
    if weight is not None:
        y *= cast(weight, y.dtype).reshape(normalized_shape)
    if bias is not None:
        y += cast(bias, y.dtype).reshape(normalized_shape)
    return _finish(y, out), store(mean_out, mean), store(rstd_out, rstd)


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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x·scale + shift over dim 1, scale = weight/sqrt(running_var + eps) and shift = bias −
    running_mean·scale (torch's CPU inference kernel folds it the same way)."""
    out = resize(out, x.shape)
    y = _work(x, out)
    ct = y.dtype
    scale = 1 / np.sqrt(cast(running_var, ct) + cast(eps, ct))
    if weight is not None:
        scale *= cast(weight, ct)
    shift = -cast(running_mean, ct) * scale
    if bias is not None:
        shift += cast(bias, ct)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    np.multiply(x, scale.reshape(shape), out=y)
    y += shift.reshape(shape)
    return _finish(y, out), resize(save_mean, (0,)), resize(save_invstd, (0,))


@kernel("aten::native_group_norm.out", dtypes=FLOAT_DTYPES)
@quiet
def native_group_norm_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    n: int,
    c: int,
    hxw: int,
    group: PositiveInt,
    eps: float,
    out: np.ndarray,
    mean_out: np.ndarray,
    rstd_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalize each of `group` channel groups per sample; mean/rstd are (N, group)."""
    if c % group:
        raise KernelError(f"group_norm: {c} channels do not split into {group} groups")
    v = cast(x, opmath(x.dtype)).reshape(n, group, -1)
    mean, rstd = _moments(v, (2,), eps)
    y = ((v - mean) * rstd).reshape(x.shape)
    y = _affine(y, weight, bias, (1, c) + (1,) * (x.ndim - 2))
    return store(out, y), store(mean_out, mean.reshape(n, group)), store(rstd_out, rstd.reshape(n, group))


def _batch_stats(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """x in opmath, its per-channel mean and invstd (shaped to broadcast), and the count."""
    v = cast(x, opmath(x.dtype))
    axes = (0, *range(2, x.ndim))
    mean, invstd = _moments(v, axes, eps)
    return v, mean, invstd, x.size // max(x.shape[1], 1)


def _train_norm(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    eps: float,
    outs: Outs,
) -> tuple[Outs, np.ndarray, int]:
    v, mean, invstd, count = _batch_stats(x, eps)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = _affine((v - mean) * invstd, weight, bias, shape)
    out, save_mean, save_invstd = outs
    stored = (store(out, y), store(save_mean, mean.reshape(-1)), store(save_invstd, invstd.reshape(-1)))
    return stored, mean.reshape(-1), count


@kernel("aten::_native_batch_norm_legit.out", dtypes=FLOAT_DTYPES)
@quiet
def native_batch_norm_legit_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    running_mean: np.ndarray,
    running_var: np.ndarray,
    training: bool,
    momentum: float,
    eps: float,
    out: np.ndarray,
    save_mean: np.ndarray,
    save_invstd: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch statistics when training (and running-stat updates), else the running ones."""
    if not training:
        return native_batch_norm_legit_no_training_out(
            x, weight, bias, running_mean, running_var, momentum, eps, out, save_mean, save_invstd
        )
    outs, mean, count = _train_norm(x, weight, bias, eps, (out, save_mean, save_invstd))
    var = np.var(cast(x, mean.dtype), axis=(0, *range(2, x.ndim)), ddof=1 if count > 1 else 0)
    np.copyto(running_mean, (1 - momentum) * running_mean + momentum * mean, casting="unsafe")
    np.copyto(running_var, (1 - momentum) * running_var + momentum * var, casting="unsafe")
    return outs


@kernel("aten::_native_batch_norm_legit.no_stats_out", dtypes=FLOAT_DTYPES)
@quiet
def native_batch_norm_legit_no_stats_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    training: bool,
    momentum: float,
    eps: float,
    out: np.ndarray,
    save_mean: np.ndarray,
    save_invstd: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalize with the batch's own statistics (there are no running ones)."""
    return _train_norm(x, weight, bias, eps, (out, save_mean, save_invstd))[0]
