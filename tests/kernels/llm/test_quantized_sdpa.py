"""`llama::custom_quantized_sdpa.out` beyond its conformance spec (tests/kernels/llm/quantized_sdpa.py): it reads
no cache position past the queries' own, and refuses what it cannot do with typed errors."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.errors import KernelError, MethodInputError
from etbuild.kernels.llm.quantized_sdpa import custom_quantized_sdpa_out


def _quantized(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random int8 codes with a positive float32 scale and an int8 zero point per token and head."""
    codes = rng.integers(-128, 128, shape, dtype=np.int8)
    scale = (rng.random((*shape[:3], 1)) * 0.05 + 1e-3).astype(np.float32)
    zero = rng.integers(-20, 20, (*shape[:3], 1), dtype=np.int8)
    return codes, scale, zero


def _call(q, k, v, start: int, mask=None, causal=True, scale=None, seq_at_2=False):  # noqa: ANN001, ANN202
    out = np.empty(q[0].shape, np.float32)
    return custom_quantized_sdpa_out(q[0], k[0], v[0], start, mask, 0.0, causal, scale, q[2], q[1], k[2], k[1],
                                     v[2], v[1], seq_at_2, out)


def test_unwritten_positions_are_never_read():
    rng = np.random.default_rng(2)
    q, k, v = _quantized((1, 2, 2, 4), rng), _quantized((1, 16, 2, 4), rng), _quantized((1, 16, 2, 4), rng)
    before = _call(q, k, v, 5)
    for codes, scale, _ in (k, v):
        codes[:, 7:], scale[:, 7:] = 127, np.nan
    np.testing.assert_array_equal(_call(q, k, v, 5), before)


def test_errors_are_typed():
    rng = np.random.default_rng(3)
    q, k, v = _quantized((1, 2, 2, 4), rng), _quantized((1, 8, 2, 4), rng), _quantized((1, 8, 2, 4), rng)
    with pytest.raises(MethodInputError, match="llama::custom_quantized_sdpa: positions 7…8 are past the KV cache"):
        _call(q, k, v, 7)
    with pytest.raises(KernelError, match="sequence at dim 2"):
        _call(q, k, v, 0, seq_at_2=True)
    with pytest.raises(KernelError, match="key needs its scale and zero point"):
        _call(q, (k[0], None, None), v, 0)
    with pytest.raises(KernelError, match="query must be int8 with a float32 scale"):
        _call((q[0].astype(np.float32), q[1], q[2]), k, v, 0)
    with pytest.raises(KernelError, match="needs a scale and zero point of shape"):
        _call(q, (k[0], k[1][:, :4], k[2][:, :4]), v, 0)
