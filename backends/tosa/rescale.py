"""TOSA's fixed-point scales: a real factor as an int32 multiplier and a right shift (RESCALE). Torch-free.

RESCALE computes round(x × multiplier / 2**shift) with scale32 multipliers in [2**30, 2**31) and shifts in
[2, 62] (TOSA 1.0 specification, RESCALE). A factor too small for that range is flushed to multiplier 0.
"""

from __future__ import annotations

import math

import numpy as np

MIN_SHIFT, MAX_SHIFT = 2, 62
INT8_SPAN = 255
"""The largest |q − zero point| of an int8 value."""


def multiplier_shift(scale: float) -> tuple[int, int]:
    """(multiplier, shift) with multiplier / 2**shift closest to `scale` (> 0)."""
    if scale <= 0.0 or not math.isfinite(scale):
        raise ValueError(f"a rescale factor must be positive and finite; got {scale}")
    mantissa, exponent = math.frexp(scale)
    multiplier, shift = round(mantissa * (1 << 31)), 31 - exponent
    if multiplier == 1 << 31:
        multiplier, shift = multiplier // 2, shift - 1
    if shift > MAX_SHIFT:
        return 0, MAX_SHIFT
    if shift < MIN_SHIFT:
        raise ValueError(f"a rescale factor of {scale} is too large for TOSA's RESCALE")
    return multiplier, shift


def multipliers_shifts(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (int32 multipliers, int8 shifts) of an array of factors."""
    pairs = [multiplier_shift(float(s)) for s in np.asarray(scales, dtype=np.float64).reshape(-1)]
    return (np.array([m for m, _ in pairs], dtype=np.int32), np.array([s for _, s in pairs], dtype=np.int8))


def keeps_int8(scale: float) -> bool:
    """Whether RESCALE by `scale` (same zero point in and out) gives every int8 value back unchanged: the
    fixed-point factor is within 1/(2·255) of 1, so round(d × factor) = d for every |d| ≤ 255."""
    if not 0.5 < scale < 2.0:
        return False
    multiplier, shift = multiplier_shift(scale)
    return INT8_SPAN * abs(multiplier / 2**shift - 1.0) < 0.5
