"""The llama:: kernels refuse what they cannot do with typed errors: a write or a query past the KV cache is a
MethodInputError (a position the caller gave), a malformed call a KernelError."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.errors import KernelError, MethodInputError
from etbuild.kernels.llm.cache import update_cache_out, update_cache_with_indices_out
from etbuild.kernels.llm.sdpa import custom_sdpa_out, sdpa_with_kv_cache_out

CACHE = np.zeros((1, 8, 2, 4), dtype=np.float32)


def test_update_past_the_cache_is_a_method_input_error() -> None:
    cache = CACHE.copy()
    with pytest.raises(MethodInputError, match=r"positions 7…8 are past the KV cache, which holds positions 0…7"):
        update_cache_out(np.ones((1, 2, 2, 4), np.float32), cache, 7, np.empty(1, np.float32))
    assert not cache.any()
    with pytest.raises(MethodInputError, match="past the KV cache"):
        update_cache_out(np.ones((1, 1, 2, 4), np.float32), cache, -1, np.empty(1, np.float32))


def test_update_with_an_index_past_the_cache_is_a_method_input_error() -> None:
    with pytest.raises(MethodInputError, match=r"an index is past the KV cache, which holds positions 0…7"):
        update_cache_with_indices_out(np.ones((1, 1, 2, 4), np.float32), CACHE.copy(), 0, np.array([[8]]),
                                      np.empty(1, np.float32))


def test_update_fills_the_cache_in_place() -> None:
    cache, value = CACHE.copy(), np.arange(16, dtype=np.float32).reshape(1, 2, 2, 4)
    update_cache_out(value, cache, 3, np.empty(1, np.float32))
    np.testing.assert_array_equal(cache[:, 3:5], value)
    assert not cache[:, :3].any() and not cache[:, 5:].any()


def test_sdpa_past_the_cache_is_a_method_input_error() -> None:
    q = np.ones((1, 2, 4, 4), np.float32)
    with pytest.raises(MethodInputError, match="llama::custom_sdpa: positions 7…8 are past the KV cache"):
        custom_sdpa_out(q, CACHE, CACHE, 7, None, 0.0, True, None, np.empty(q.shape, np.float32))
    with pytest.raises(MethodInputError, match="llama::sdpa_with_kv_cache"):
        sdpa_with_kv_cache_out(q, q[:, :, :2], q[:, :, :2], CACHE.copy(), CACHE.copy(), 7, 2, None, 0.0, True, None,
                               np.empty(q.shape, np.float32))


@pytest.mark.parametrize(("args", "message"), [
    ((np.ones((1, 1, 3, 4), np.float32), CACHE, CACHE, 0, None, 0.0, True, None), "a multiple of cache heads"),
    ((np.ones((1, 1, 4, 4), np.float32), CACHE, CACHE, 0, np.zeros((1, 8), np.float32), 0.0, True, None),
     "attn_mask and is_causal cannot both be set"),
    ((np.ones((1, 1, 4, 4), np.float32), CACHE, CACHE, 0, np.zeros((1, 5), np.float32), 0.0, False, None),
     r"attn_mask must be float \[S, S_max\] = \[1, 8\], got float32\[1, 5\]"),
    ((np.ones((1, 1, 4, 4), np.float64), CACHE, CACHE, 0, None, 0.0, True, None), "must be float32"),
])
def test_a_malformed_sdpa_is_a_kernel_error(args: tuple, message: str) -> None:
    with pytest.raises(KernelError, match=message):
        custom_sdpa_out(*args, np.empty((1, 1, 4, 4), np.float32))
