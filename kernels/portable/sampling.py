"""Random ops: rand, randn, native_dropout. Values come from numpy's default generator.

Their results match torch in shape, dtype and distribution only; dropout in inference
(train False) is the identity with an all-true mask.
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import cast, opmath, store
from etbuild.runtime.kernel_registry import FLOAT_DTYPES, NonNegativeInts, kernel

_RNG = np.random.default_rng()


@kernel("aten::rand.out", dtypes=FLOAT_DTYPES)
def rand_out(size: NonNegativeInts, out: np.ndarray) -> np.ndarray:
    """Uniform on [0, 1)."""
    return store(out, _RNG.random(size))


@kernel("aten::randn.out", dtypes=FLOAT_DTYPES)
def randn_out(size: NonNegativeInts, out: np.ndarray) -> np.ndarray:
    """Standard normal."""
    return store(out, _RNG.standard_normal(size))


@kernel("aten::native_dropout.out", dtypes=FLOAT_DTYPES)
def native_dropout_out(
    x: np.ndarray, p: float, train: bool | None, out: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Zero each element with probability p and scale the rest by 1/(1-p) when training."""
    if not 0 <= p <= 1:
        raise KernelError(f"dropout probability must be in [0, 1], got {p}")
    if train is False:
        return store(out, x), store(mask, np.ones(x.shape, dtype=bool))
    keep = _RNG.random(x.shape) >= p
    v = cast(x, opmath(x.dtype))
    scale = v.dtype.type(0 if p == 1 else 1 / (1 - p))
    return store(out, v * keep * scale), store(mask, keep)
