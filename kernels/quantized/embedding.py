"""embedding_byte / embedding_4bit / embedding_2bit: rows of a quantized table, dequantized.

The table is (rows, columns) of int8 or uint8 values (`byte`), or packed uint8: two 4-bit
values per byte, element 2j in the high nibble and 2j+1 in the low one, each stored plus 8;
four 2-bit values per byte, element 4j+k in bits 2k..2k+1, each stored plus 2 (ExecuTorch's
packing). Scales are (rows,) or (rows, groups), the group length being the row length over
the groups; zero points, if given, have the scales' dtype. A looked-up row is
`(q − zero_point) · scale` in the scales' dtype (the `dtype_out` forms may name another).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.quantized.common import out_dtype, store
from etbuild.runtime.kernel_registry import kernel

FLOAT_SCALES = ("float32", "float16")


def _rows(weight: np.ndarray, indices: np.ndarray) -> np.ndarray:
    if indices.dtype.kind not in "iu":
        raise KernelError(f"embedding: expected integer indices; got {indices.dtype}")
    if indices.size and (indices.min() < 0 or indices.max() >= weight.shape[0]):
        raise _out_of_range(int(indices.min()), int(indices.max()), weight.shape[0])
    return weight[indices]


def _out_of_range(low: int, high: int, rows: int) -> KernelError:
    """The error for indices `low … high` of which one is outside [0, rows): a token id is never read from the end."""
    return KernelError(f"embedding: index {low if low < 0 else high} is out of range for a table of {rows} rows "
                       f"(expected 0 … {rows - 1})")


def _unpack_table(bits: int) -> np.ndarray:
    """(256, 8 // bits) int8: the values packed in each byte, ExecuTorch's nibble / crumb order, minus the offset."""
    byte = np.arange(256, dtype=np.int16)[:, None]
    if bits == 4:  # element 2j in the high nibble
        parts = np.concatenate([byte >> 4, byte & 0xF], axis=1)
    else:  # 2 bits: element 4j in the low bits
        parts = np.concatenate([(byte >> (2 * k)) & 0x3 for k in range(8 // bits)], axis=1)
    return (parts - (1 << (bits - 1))).astype(np.int8)


UNPACKED = {bits: _unpack_table(bits) for bits in (2, 4)}


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """Packed uint8 rows → int8 values, one table lookup per byte."""
    return UNPACKED[bits][packed].reshape(*packed.shape[:-1], packed.shape[-1] * (8 // bits))


def _dequantized(
    values: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, dtype: np.dtype
) -> np.ndarray:
    """(…, columns) quantized rows with their (…, groups) parameters → (…, columns) of dtype."""
    columns = values.shape[-1]
    groups = scales.shape[-1] if scales.ndim == values.ndim else 1
    if groups == 0 or columns % groups:
        raise KernelError(f"embedding: {columns} columns do not split into {groups} groups")
    grouped = values.reshape(*values.shape[:-1], groups, columns // groups)
    scale = scales.reshape(*values.shape[:-1], groups, 1)
    shifted = grouped.astype(scales.dtype)
    if zero_points is not None:
        shifted = shifted - zero_points.reshape(scale.shape).astype(scales.dtype)
    return (shifted * scale).reshape(values.shape).astype(dtype, copy=False)


def _lookup(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, indices: np.ndarray, bits: int,
    dtype: np.dtype, out: np.ndarray,
) -> np.ndarray:
    if weight.ndim != 2 or scales.ndim not in (1, 2) or scales.shape[0] != weight.shape[0]:
        raise KernelError(f"embedding: expected a 2-d table and (rows[, groups]) scales; got {list(weight.shape)} "
                          f"and {list(scales.shape)}")
    rows = _rows(weight, indices)
    values = rows if bits == 8 else _unpack(rows, bits)
    params = _rows(scales, indices)
    zeros = None if zero_points is None else _rows(zero_points, indices)
    return store(out, _dequantized(values, params, zeros, dtype))


def _lookup_fast(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, indices: np.ndarray, bits: int,
    dtype: np.dtype, out: np.ndarray,
) -> Callable[[], None] | None:
    """_lookup bound to these arrays (a decode step looks one token up: ~40 µs of numpy calls through the kernel),
    when out already has the result's shape and dtype, the scales' dtype, and C-contiguous memory; else None. The
    same operations on the same values: the codes widened to the scales' dtype, minus the zero point, times the
    scale; indices checked on every call."""
    columns = weight.shape[-1] * (8 // bits) if weight.ndim == 2 else 0
    groups = scales.shape[1] if scales.ndim == 2 else 1
    table_ok = weight.ndim == 2 and scales.ndim in (1, 2) and scales.shape[0] == weight.shape[0]
    params_ok = groups > 0 and columns % groups == 0 and (zero_points is None or zero_points.shape == scales.shape)
    index_ok = indices.size > 0 and indices.dtype.kind in "iu" and indices.flags.c_contiguous
    out_ok = dtype == scales.dtype == out.dtype and out.shape == (*indices.shape, columns) and out.flags.c_contiguous
    if not (table_ok and params_ok and index_ok and out_ok):
        return None
    n, rows = indices.size, weight.shape[0]
    flat = indices.reshape(-1)
    grouped = out.reshape(n, groups, columns // groups)
    codes = np.empty((n, weight.shape[1], 8 // bits), np.int8) if bits != 8 else None
    values = (codes if codes is not None else np.empty((n, columns), weight.dtype)).reshape(grouped.shape)
    packed = np.empty((n, weight.shape[1]), np.uint8) if codes is not None else values.reshape(n, columns)
    table = UNPACKED.get(bits)
    scale, zero = np.empty((n, groups, 1), scales.dtype), np.empty((n, groups, 1), scales.dtype)

    def lookup() -> None:
        low, high = (int(flat[0]),) * 2 if n == 1 else (int(flat.min()), int(flat.max()))
        if low < 0 or high >= rows:
            raise _out_of_range(low, high, rows)
        np.take(weight, flat, axis=0, out=packed)
        if codes is not None:
            np.take(table, packed, axis=0, out=codes)
        np.take(scales.reshape(rows, groups), flat, axis=0, out=scale.reshape(n, groups))
        if zero_points is None:
            np.multiply(values, scale, out=grouped)
            return
        np.take(zero_points.reshape(rows, groups), flat, axis=0, out=zero.reshape(n, groups))
        np.subtract(values, zero, out=grouped)
        np.multiply(grouped, scale, out=grouped)

    return lookup


def _fast(bits: int, with_dtype: bool) -> Callable[..., Callable[[], None] | None]:
    """The fast path of an embedding kernel (its argument list, with or without `dtype`)."""

    def fast(weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int,
             quant_max: int, indices: np.ndarray, *rest: Any) -> Callable[[], None] | None:
        dtype = out_dtype(rest[0], scales.dtype) if with_dtype else scales.dtype
        out = rest[-1]
        if not isinstance(out, np.ndarray) or not isinstance(indices, np.ndarray):
            return None
        return _lookup_fast(weight, scales, zero_points, indices, bits, dtype, out)

    return fast


@kernel("quantized_decomposed::embedding_byte.out", fast=_fast(8, False), dtypes=("int8", "uint8"))
def embedding_byte_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 8, scales.dtype, out)


@kernel("quantized_decomposed::embedding_byte.dtype_out", fast=_fast(8, True), dtypes=("int8", "uint8"))
def embedding_byte_dtype_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, dtype: int | None, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 8, out_dtype(dtype, scales.dtype), out)


@kernel("quantized_decomposed::embedding_4bit.out", fast=_fast(4, False), dtypes=("uint8",))
def embedding_4bit_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 4, scales.dtype, out)


@kernel("quantized_decomposed::embedding_4bit.dtype_out", fast=_fast(4, True), dtypes=("uint8",))
def embedding_4bit_dtype_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, dtype: int | None, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 4, out_dtype(dtype, scales.dtype), out)


@kernel("quantized_decomposed::embedding_2bit.out", fast=_fast(2, False), dtypes=("uint8",))
def embedding_2bit_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 2, scales.dtype, out)


@kernel("quantized_decomposed::embedding_2bit.dtype_out", fast=_fast(2, True), dtypes=("uint8",))
def embedding_2bit_dtype_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, dtype: int | None, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 2, out_dtype(dtype, scales.dtype), out)
