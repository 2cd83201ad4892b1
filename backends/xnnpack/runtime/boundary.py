"""Moving external values across the delegate boundary: storage form ⇄ working form.

Outside, a value is in its datatype's storage (int8 codes, float16, bf16 bits, float32);
inside, in working form (float32 real numbers, see grids.py). An fp32 or int32 external in
contiguous memory is used in place; any other is loaded into (or stored from) its arena slot
by one of these steps.
"""

from __future__ import annotations

import numpy as np

from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.runtime.grids import Snap
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.runtime.steps import Step


def direct(value: Value, arr: np.ndarray) -> bool:
    """Whether the caller's array can serve as the value itself."""
    plain = value.datatype in (DT.FP32, DT.INT32) and value.grid.datatype == value.datatype
    return plain and arr.dtype == value.working and arr.flags.c_contiguous


def loader(value: Value, src: np.ndarray, dst: np.ndarray, snap: Snap | None) -> Step:
    """The step putting the caller's input src (storage form) into dst (working form)."""
    grid = value.grid
    if grid.quantized and value.datatype != DT.FP32:
        zero, scale = np.float32(grid.zero_point), np.float32(grid.scale)

        def dequantize() -> None:
            np.subtract(src, zero, out=dst)
            np.multiply(dst, scale, out=dst)

        return dequantize
    if value.datatype == DT.BF16:
        bits = dst.view(np.uint32)

        def widen() -> None:
            np.copyto(bits, src)
            np.left_shift(bits, np.uint32(16), out=bits)

        return widen
    if snap is None:
        return lambda: np.copyto(dst, src)

    def load() -> None:
        np.copyto(dst, src)
        snap(dst)

    return load


def storer(value: Value, src: np.ndarray, dst: np.ndarray) -> Step:
    """The step writing the working form src (which it may overwrite) to the caller's output dst."""
    grid = value.grid
    if grid.quantized:
        inv, zero = np.float32(1.0 / grid.scale), np.float32(grid.zero_point)

        def quantize() -> None:
            np.multiply(src, inv, out=src)
            np.rint(src, out=src)
            np.add(src, zero, out=src)
            np.copyto(dst, src, casting="unsafe")

        return quantize
    if value.datatype == DT.BF16:
        return lambda: np.copyto(dst, src.view(np.uint32) >> np.uint32(16), casting="unsafe")
    return lambda: np.copyto(dst, src, casting="unsafe")
