"""Helpers shared by the quantized kernel families: dtype codes, result writes. Registers nothing."""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.runtime.tensor import numpy_dtype, resize

FLOAT32 = np.dtype(np.float32)
QUANTIZED_DTYPES = ("uint8", "int8", "int16", "int32")
"""The dtypes a quantized tensor may have (torch's quantized_decomposed bounds table)."""


def store(out: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Resize out to value's shape, write value (cast to out's dtype) and return out."""
    if out.shape != value.shape:
        out = resize(out, value.shape)
    np.copyto(out, value, casting="unsafe")
    return out


def check_dtype(x: np.ndarray, code: int, what: str) -> None:
    """A quantized input must have the dtype its `dtype` argument names."""
    if x.dtype != numpy_dtype(code):
        raise KernelError(f"{what}: expected input of dtype {numpy_dtype(code)}; got {x.dtype}")


def out_dtype(code: int | None, default: np.dtype = FLOAT32) -> np.dtype:
    """The dtype an optional ScalarType argument names (None: `default`)."""
    return default if code is None else numpy_dtype(code)


def as_float32(x: np.ndarray) -> np.ndarray:
    """Input to quantize: float16 and float32 compute as float32, as torch's reference does."""
    if x.dtype.kind != "f":
        raise KernelError(f"expected a float input to quantize; got {x.dtype}")
    return x.astype(FLOAT32, copy=False)


def channel_view(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """Per-channel parameters shaped to broadcast along `axis` of an ndim-d tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def torch_float(a: np.dtype, b: np.dtype) -> np.dtype:
    """The dtype torch computes `a ∘ b` in when one side is a float (the wider float of the two floats)."""
    floats = [d for d in (a, b) if d.kind == "f"]
    return max(floats, key=lambda d: d.itemsize)
