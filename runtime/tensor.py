"""Tensor helpers shared by the runtime and the kernels: dtype codes and bounded resizing."""

from __future__ import annotations

import numpy as np

from etbuild.errors import InvalidProgram, KernelError
from etbuild.runtime import features
from etbuild.runtime.format.program import ScalarType

SCALAR_TYPE_TO_DTYPE: dict[int, np.dtype] = {
    ScalarType.BYTE: np.dtype(np.uint8),
    ScalarType.CHAR: np.dtype(np.int8),
    ScalarType.SHORT: np.dtype(np.int16),
    ScalarType.INT: np.dtype(np.int32),
    ScalarType.LONG: np.dtype(np.int64),
    ScalarType.HALF: np.dtype(np.float16),
    ScalarType.FLOAT: np.dtype(np.float32),
    ScalarType.DOUBLE: np.dtype(np.float64),
    ScalarType.BOOL: np.dtype(np.bool_),
    ScalarType.UINT16: np.dtype(np.uint16),
    ScalarType.UINT32: np.dtype(np.uint32),
    ScalarType.UINT64: np.dtype(np.uint64),
}
DTYPE_TO_SCALAR_TYPE: dict[np.dtype, int] = {v: k for k, v in SCALAR_TYPE_TO_DTYPE.items()}


def numpy_dtype(code: int) -> np.dtype:
    """The numpy dtype of a ScalarType code; InvalidProgram for codes we cannot hold."""
    try:
        return SCALAR_TYPE_TO_DTYPE[code]
    except KeyError:
        raise InvalidProgram(f"scalar type {code} is not supported by this runtime") from None


def scalar_type(dtype: np.dtype) -> int:
    """The ScalarType code of a numpy dtype."""
    return DTYPE_TO_SCALAR_TYPE[np.dtype(dtype)]


class BoundedArray(np.ndarray):
    """A planned tensor whose shape may change at run time, up to its planned bound.

    `storage` is the flat byte region planned for the tensor at its upper bound.
    """

    storage: np.ndarray | None = None


def bounded(storage: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> BoundedArray:
    """A view of `storage` (flat uint8) as dtype/shape that `resize` may reshape later."""
    count = int(np.prod(shape, dtype=np.int64))
    arr = storage[: count * dtype.itemsize].view(dtype).reshape(shape).view(BoundedArray)
    arr.storage = storage
    return arr


def resize(out: np.ndarray, shape: tuple[int, ...] | list[int]) -> np.ndarray:
    """`out` with the given shape: itself when the shape already matches, else a new view.

    Only tensors planned as DYNAMIC_BOUND may change shape, and never beyond their bound.
    """
    shape = tuple(int(s) for s in shape)
    if out.shape == shape:
        return out
    if features.DYNAMIC_SHAPES and isinstance(out, BoundedArray) and out.storage is not None:
        return _within_bound(out, out.storage, shape)
    raise KernelError(f"output has static shape {list(out.shape)} but the result is {list(shape)}")


def _within_bound(out: BoundedArray, storage: np.ndarray, shape: tuple[int, ...]) -> BoundedArray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * out.dtype.itemsize
    if nbytes > storage.nbytes:
        raise KernelError(
            f"result shape {list(shape)} needs {nbytes} bytes, beyond the {storage.nbytes} "
            "planned for its upper bound"
        )
    return bounded(storage, out.dtype, shape)
