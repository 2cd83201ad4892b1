"""`llama::custom_quantized_sdpa.out` against torch: attention of the dequantized int8 query over the dequantized
int8 caches (per-token scales and zero points), causal from start_pos or with a mask; odd shapes, grouped-query
heads, a query chunk of one and of several tokens; typed errors for what it cannot do. (ExecuTorch 1.5.1 registers
no eager kernel for it; tests/interop/test_export_llm.py checks it against ExecuTorch's runtime on export_llm's
int8-cache program.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.errors import KernelError, MethodInputError
from etbuild.kernels.llm.quantized_sdpa import custom_quantized_sdpa_out


def _quantized(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random int8 codes with a positive float32 scale and an int8 zero point per token and head."""
    codes = rng.integers(-128, 128, shape, dtype=np.int8)
    scale = (rng.random((*shape[:3], 1)) * 0.05 + 1e-3).astype(np.float32)
    zero = rng.integers(-20, 20, (*shape[:3], 1), dtype=np.int8)
    return codes, scale, zero


def _float(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> torch.Tensor:
    return (torch.from_numpy(codes).float() - torch.from_numpy(zero).float()) * torch.from_numpy(scale)


def _reference(q, k, v, start: int, mask: np.ndarray | None, scale: float | None) -> np.ndarray:  # noqa: ANN001
    """torch's scaled_dot_product_attention over positions 0 … start + S - 1 (all of them with a mask)."""
    query, key, value = _float(*q), _float(*k), _float(*v)
    s, heads, kv_heads = query.shape[1], query.shape[2], key.shape[2]
    n = key.shape[1] if mask is not None else start + s
    groups = heads // kv_heads
    key, value = key[:, :n].repeat_interleave(groups, 2), value[:, :n].repeat_interleave(groups, 2)
    attn = torch.from_numpy(mask) if mask is not None else \
        torch.arange(n)[None, :] <= (start + torch.arange(s))[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask=attn, scale=scale)
    return out.transpose(1, 2).numpy()


def _call(q, k, v, start: int, mask=None, causal=True, scale=None, seq_at_2=False):  # noqa: ANN001, ANN202
    out = np.empty(q[0].shape, np.float32)
    return custom_quantized_sdpa_out(q[0], k[0], v[0], start, mask, 0.0, causal, scale, q[2], q[1], k[2], k[1],
                                     v[2], v[1], seq_at_2, out)


@pytest.mark.parametrize(("batch", "tokens", "heads", "kv_heads", "dim", "cache", "start"), [
    (1, 1, 4, 2, 16, 32, 0), (1, 1, 4, 2, 16, 32, 31), (1, 5, 6, 3, 8, 17, 7), (2, 3, 2, 2, 5, 9, 6),
    (1, 7, 8, 1, 12, 7, 0),
])
def test_causal_attention_equals_torch_on_dequantized_values(batch, tokens, heads, kv_heads, dim, cache, start):
    rng = np.random.default_rng(tokens * 31 + start)
    q = _quantized((batch, tokens, heads, dim), rng)
    k, v = _quantized((batch, cache, kv_heads, dim), rng), _quantized((batch, cache, kv_heads, dim), rng)
    out = _call(q, k, v, start)
    assert out.shape == (batch, tokens, heads, dim) and out.dtype == np.float32
    np.testing.assert_allclose(out, _reference(q, k, v, start, None, None), rtol=1e-5, atol=1e-5)


def test_a_mask_over_the_whole_cache_and_a_scale():
    rng = np.random.default_rng(1)
    q, k, v = _quantized((1, 3, 4, 8), rng), _quantized((1, 10, 2, 8), rng), _quantized((1, 10, 2, 8), rng)
    mask = np.where(rng.random((3, 10)) < 0.3, -np.inf, 0.0).astype(np.float32)
    mask[:, 0] = 0.0  # every query sees at least one position
    out = _call(q, k, v, 0, mask=mask, causal=False, scale=0.2)
    np.testing.assert_allclose(out, _reference(q, k, v, 0, mask, 0.2), rtol=1e-5, atol=1e-5)


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
