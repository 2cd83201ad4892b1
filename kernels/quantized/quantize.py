"""quantize / dequantize per tensor, per channel and per token.

quantize: q = clamp(round_half_even(x · (1 / scale)) + zero_point, quant_min, quant_max) as dtype.
dequantize: x = (q − zero_point) · scale as out_dtype (float32 by default).

A scalar scale (a float argument, or a one-element tensor read with `.item()`) is rounded to
float32 and the arithmetic is float32, as torch multiplies a float32 tensor by a Python
float. Scale tensors (per channel, per token) keep their dtype: float64 scales (per token)
make the arithmetic float64 before the final cast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.quantized.common import (
    FLOAT32,
    QUANTIZED_DTYPES,
    as_float32,
    channel_view,
    check_dtype,
    out_dtype,
    store,
    torch_float,
)
from etbuild.runtime.kernel_registry import kernel
from etbuild.runtime.tensor import numpy_dtype

QUANTIZE_INPUTS = ("float32", "float16")


def _round_clamp(scaled: np.ndarray, zero_point: np.ndarray | np.floating, quant_min: int, quant_max: int) -> Any:
    with np.errstate(invalid="ignore", over="ignore"):
        return np.clip(np.rint(scaled) + zero_point, quant_min, quant_max)


def _quantize_scalar(
    x: np.ndarray, scale: float, zero_point: int, quant_min: int, quant_max: int, dtype: int, out: np.ndarray
) -> np.ndarray:
    inv = FLOAT32.type(1.0 / scale)
    with np.errstate(over="ignore"):
        value = _round_clamp(as_float32(x) * inv, FLOAT32.type(zero_point), quant_min, quant_max)
    return store(out, value.astype(numpy_dtype(dtype)))


def _dequantize_scalar(
    q: np.ndarray, scale: float, zero_point: int, dtype: int, target: int | None, out: np.ndarray
) -> np.ndarray:
    check_dtype(q, dtype, "dequantize_per_tensor")
    ct = out_dtype(target)
    opmath = FLOAT32 if ct.itemsize < FLOAT32.itemsize else ct  # float16 multiplies in float32, then rounds
    with np.errstate(over="ignore"):
        return store(out, (q.astype(ct) - ct.type(zero_point)).astype(opmath) * opmath.type(scale))


def _item(t: np.ndarray, what: str) -> float | int:
    if t.size != 1:
        raise KernelError(f"expected a one-element {what} tensor; got shape {list(t.shape)}")
    return t.reshape(-1)[0].item()


@kernel("quantized_decomposed::quantize_per_tensor.out", dtypes=QUANTIZE_INPUTS)
def quantize_per_tensor_out(
    x: np.ndarray, scale: float, zero_point: int, quant_min: int, quant_max: int, dtype: int, out: np.ndarray
) -> np.ndarray:
    return _quantize_scalar(x, scale, zero_point, quant_min, quant_max, dtype, out)


@kernel("quantized_decomposed::quantize_per_tensor.Tensor_out", dtypes=QUANTIZE_INPUTS)
def quantize_per_tensor_tensor_out(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, quant_min: int, quant_max: int, dtype: int,
    out: np.ndarray,
) -> np.ndarray:
    return _quantize_scalar(x, _item(scale, "scale"), int(_item(zero_point, "zero_point")), quant_min, quant_max,
                            dtype, out)


@kernel("quantized_decomposed::dequantize_per_tensor.out", dtypes=QUANTIZED_DTYPES)
def dequantize_per_tensor_out(
    q: np.ndarray, scale: float, zero_point: int, quant_min: int, quant_max: int, dtype: int, target: int | None,
    out: np.ndarray,
) -> np.ndarray:
    return _dequantize_scalar(q, scale, zero_point, dtype, target, out)


@kernel("quantized_decomposed::dequantize_per_tensor.Tensor_out", dtypes=QUANTIZED_DTYPES)
def dequantize_per_tensor_tensor_out(
    q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, quant_min: int, quant_max: int, dtype: int,
    target: int | None, out: np.ndarray,
) -> np.ndarray:
    return _dequantize_scalar(q, _item(scale, "scale"), int(_item(zero_point, "zero_point")), dtype, target, out)


def _check_axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise KernelError(f"{what}: axis {axis} is out of range for a {ndim}-d tensor")
    return axis % ndim


@kernel("quantized_decomposed::quantize_per_channel.out", dtypes=QUANTIZE_INPUTS)
def quantize_per_channel_out(
    x: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, axis: int, quant_min: int, quant_max: int,
    dtype: int, out: np.ndarray,
) -> np.ndarray:
    axis = _check_axis(axis, x.ndim, "quantize_per_channel")
    ct = torch_float(FLOAT32, scales.dtype)
    inv = channel_view(1.0 / scales, axis, x.ndim)
    zeros = channel_view(zero_points, axis, x.ndim).astype(ct)
    with np.errstate(over="ignore", divide="ignore"):
        value = _round_clamp(as_float32(x).astype(ct) * inv, zeros, quant_min, quant_max)
    return store(out, value.astype(numpy_dtype(dtype)))


@kernel("quantized_decomposed::dequantize_per_channel.out", dtypes=QUANTIZED_DTYPES)
def dequantize_per_channel_out(
    q: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, axis: int, quant_min: int, quant_max: int,
    dtype: int, target: int | None, out: np.ndarray,
) -> np.ndarray:
    check_dtype(q, dtype, "dequantize_per_channel")
    axis = _check_axis(axis, q.ndim, "dequantize_per_channel")
    shifted = q if zero_points is None else _minus(q, channel_view(zero_points, axis, q.ndim))
    ct = torch_float(shifted.dtype, scales.dtype) if shifted.dtype.kind == "f" else scales.dtype
    value = shifted.astype(ct) * channel_view(scales, axis, q.ndim).astype(ct)
    return store(out, value.astype(out_dtype(target)))


def _minus(q: np.ndarray, zero_points: np.ndarray) -> np.ndarray:
    """q − zero_points in torch's dtype: exact integers, or the zero points' float dtype."""
    if zero_points.dtype.kind == "f":
        return q.astype(zero_points.dtype) - zero_points
    return q.astype(np.int64) - zero_points.astype(np.int64)


def _per_token(params: np.ndarray, x: np.ndarray, what: str) -> np.ndarray:
    """Per-token parameters, one per row of the last dimension, shaped to broadcast."""
    rows = x.size // x.shape[-1] if x.ndim and x.shape[-1] else 0
    if params.size != rows:
        raise KernelError(f"{what}: expected {rows} per-token values; got {params.size}")
    return params.reshape((*x.shape[:-1], 1))


@kernel("quantized_decomposed::quantize_per_token.out", dtypes=("float32",))
def quantize_per_token_out(
    x: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, quant_min: int, quant_max: int, dtype: int,
    out: np.ndarray,
) -> np.ndarray:
    ct = torch_float(x.dtype, scales.dtype)
    inv = 1.0 / _per_token(scales, x, "quantize_per_token scales")
    zeros = _per_token(zero_points, x, "quantize_per_token zero_points")
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # torch adds the zero point before rounding
        value = np.clip(np.rint(x.astype(ct) * inv.astype(ct) + zeros.astype(ct)), quant_min, quant_max)
    return store(out, value.astype(numpy_dtype(dtype)))


@kernel("quantized_decomposed::dequantize_per_token.out", dtypes=QUANTIZED_DTYPES)
def dequantize_per_token_out(
    q: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, quant_min: int, quant_max: int, dtype: int,
    output_dtype: int, out: np.ndarray,
) -> np.ndarray:
    shifted = _minus(q, _per_token(zero_points, q, "dequantize_per_token zero_points"))
    scale = _per_token(scales, q, "dequantize_per_token scales")
    ct = torch_float(shifted.dtype, scale.dtype) if shifted.dtype.kind == "f" else scale.dtype
    return store(out, (shifted.astype(ct) * scale.astype(ct)).astype(numpy_dtype(output_dtype)))
