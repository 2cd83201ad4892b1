"""embedding_byte / embedding_4bit / embedding_2bit: rows of a quantized table, dequantized.

The table is (rows, columns) of int8 or uint8 values (`byte`), or packed uint8: two 4-bit
values per byte, element 2j in the high nibble and 2j+1 in the low one, each stored plus 8;
four 2-bit values per byte, element 4j+k in bits 2k..2k+1, each stored plus 2 (ExecuTorch's
packing). Scales are (rows,) or (rows, groups), the group length being the row length over
the groups; zero points, if given, have the scales' dtype. A looked-up row is
`(q − zero_point) · scale` in the scales' dtype (the `dtype_out` forms may name another).
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.quantized.common import out_dtype, store
from etbuild.runtime.kernel_registry import kernel

FLOAT_SCALES = ("float32", "float16")


def _rows(weight: np.ndarray, indices: np.ndarray) -> np.ndarray:
    if indices.dtype.kind not in "iu":
        raise KernelError(f"embedding: expected integer indices; got {indices.dtype}")
    if indices.size and (indices.min() < 0 or indices.max() >= weight.shape[0]):
        raise KernelError(f"embedding: index out of range for a table of {weight.shape[0]} rows")
    return weight[indices]


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


@kernel("quantized_decomposed::embedding_byte.out", dtypes=("int8", "uint8"))
def embedding_byte_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 8, scales.dtype, out)


@kernel("quantized_decomposed::embedding_byte.dtype_out", dtypes=("int8", "uint8"))
def embedding_byte_dtype_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, dtype: int | None, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 8, out_dtype(dtype, scales.dtype), out)


@kernel("quantized_decomposed::embedding_4bit.out", dtypes=("uint8",))
def embedding_4bit_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 4, scales.dtype, out)


@kernel("quantized_decomposed::embedding_4bit.dtype_out", dtypes=("uint8",))
def embedding_4bit_dtype_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, dtype: int | None, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 4, out_dtype(dtype, scales.dtype), out)


@kernel("quantized_decomposed::embedding_2bit.out", dtypes=("uint8",))
def embedding_2bit_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 2, scales.dtype, out)


@kernel("quantized_decomposed::embedding_2bit.dtype_out", dtypes=("uint8",))
def embedding_2bit_dtype_out(
    weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, quant_min: int, quant_max: int,
    indices: np.ndarray, dtype: int | None, out: np.ndarray,
) -> np.ndarray:
    return _lookup(weight, scales, zero_points, indices, 2, out_dtype(dtype, scales.dtype), out)
