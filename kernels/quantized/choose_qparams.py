"""choose_qparams (per tensor) and choose_qparams_per_token_asymmetric: quantization parameters
from the values themselves, for dynamic quantization. Both compute in float32 as torch does and
write scales as float64 and zero points as int64 (into outs of whatever dtype they have).

Per tensor (affine, from `determine_qparams`): the range [min(x, 0), max(x, 0)] over
quant_max − quant_min steps, the scale at least `eps` (rounded to float32); zero point
quant_min − round(min / scale), clamped into range.
Per token (int8, over the last dimension, XNNPACK's rule): scale = range / 255 (at least
float32's eps); the zero point from whichever end loses less, clamped, then rounded.
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.quantized.common import FLOAT32, store
from etbuild.runtime.kernel_registry import kernel

F32_EPS = np.finfo(np.float32).eps


@kernel("quantized_decomposed::choose_qparams.Tensor_out", dtypes=("float32",))
def choose_qparams_tensor_out(
    x: np.ndarray, quant_min: int, quant_max: int, eps: float, dtype: int, scale_out: np.ndarray,
    zero_point_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    if x.size == 0:
        raise KernelError("choose_qparams: expected a non-empty input")
    values = x.astype(FLOAT32, copy=False)
    low = min(FLOAT32.type(values.min()), FLOAT32.type(0))
    high = max(FLOAT32.type(values.max()), FLOAT32.type(0))
    scale = max((high - low) / FLOAT32.type(quant_max - quant_min), FLOAT32.type(eps))
    with np.errstate(invalid="ignore"):
        zero = int(quant_min) - int(np.rint(low / scale))
    zero = min(max(zero, quant_min), quant_max)
    return (store(scale_out, np.array([scale], dtype=np.float64)),
            store(zero_point_out, np.array([zero], dtype=np.int64)))


@kernel("quantized_decomposed::choose_qparams_per_token_asymmetric.out", dtypes=("float32",))
def choose_qparams_per_token_asymmetric_out(
    x: np.ndarray, dtype: int, scale_out: np.ndarray, zero_point_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    if x.ndim == 0 or x.shape[-1] == 0:
        raise KernelError("choose_qparams_per_token_asymmetric: expected tokens of at least one value")
    qmin, qmax = FLOAT32.type(-128), FLOAT32.type(127)
    zero = FLOAT32.type(0)
    low = np.minimum(x.min(axis=-1, keepdims=True), zero)
    high = np.maximum(x.max(axis=-1, keepdims=True), zero)
    scale = np.maximum((high - low) / FLOAT32.type(255), FLOAT32.type(F32_EPS))
    low_steps, high_steps = low / scale, high / scale
    point = np.where((qmin + low_steps) + (qmax + high_steps) > 0, qmin - low_steps, qmax - high_steps)
    point = np.rint(np.clip(point, qmin, qmax))
    return store(scale_out, scale.astype(np.float64)), store(zero_point_out, point.astype(np.int64))
