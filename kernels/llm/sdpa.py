"""`llama::custom_sdpa.out` and `llama::sdpa_with_kv_cache.out`: attention of new queries over a KV cache.

Layout (ExecuTorch's): query `[B, S, H, D]` at positions start_pos … start_pos + S - 1, key and value caches
`[B, S_max, H_kv, D]` (grouped-query attention: query head h reads cache head h // (H / H_kv)). Read from the
oracle's kernels (`executorch.extension.llm.custom_ops`) and checked against them:
- without a mask, the queries attend over the filled part of the cache only, positions 0 … start_pos + S - 1,
  and `is_causal` hides from query i the positions after start_pos + i;
- an `attn_mask` is float `[S, S_max]`, added to the scores over the whole cache; it excludes `is_causal`;
- `scale` defaults to 1/sqrt(D); dropout is not applied (inference).
`sdpa_with_kv_cache` first writes key and value into the caches at start_pos (as `llama::update_cache`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels import native
from etbuild.kernels.llm.cache import check_position, position, update_cache_out
from etbuild.runtime.kernel_registry import kernel
from etbuild.runtime.tensor import resize

FUSED_ROWS = 16  # up to this many query rows (one token; a grouped call's G rows) in one compiled pass; a prompt's
# chunk of more rows goes through numpy's products, which the loop does not beat there


def _check(op: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, causal: bool) -> None:
    if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape:
        raise KernelError(f"{op}: query must be 4-d and the key and value caches 4-d of one shape, got "
                          f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if q.dtype != np.float32 or k.dtype != q.dtype or v.dtype != q.dtype:
        raise KernelError(f"{op}: query and caches must be float32, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3] or k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise KernelError(f"{op}: query {list(q.shape)} does not fit caches {list(k.shape)} (batch and head "
                          "size must match, query heads a multiple of cache heads)")
    if mask is None:
        return
    if causal:
        raise KernelError(f"{op}: attn_mask and is_causal cannot both be set")
    if mask.ndim != 2 or mask.shape != (q.shape[1], k.shape[1]) or mask.dtype.kind != "f":
        raise KernelError(f"{op}: attn_mask must be float [S, S_max] = {[q.shape[1], k.shape[1]]}, got "
                          f"{mask.dtype}{list(mask.shape)}")


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, start_pos: int, mask: np.ndarray | None, causal: bool,
           scale: float | None) -> np.ndarray:
    """softmax(q kᵀ · scale + mask) v over the cache positions the queries see, as `[B, S, H, D]` float32."""
    b, s, h, d = q.shape
    h_kv = k.shape[2]
    n = k.shape[1] if mask is not None else start_pos + s
    qg = q.reshape(b, s, h_kv, h // h_kv, d).transpose(0, 2, 3, 1, 4)  # [B, H_kv, G, S, D]
    scores = np.matmul(qg, k[:, :n].transpose(0, 2, 3, 1)[:, :, None])  # [B, H_kv, G, S, n]
    scores *= np.float32(1.0 / np.sqrt(d) if scale is None else scale)
    if mask is not None:
        scores += mask
    elif causal and s > 1:
        hidden = np.arange(n)[None, :] > (start_pos + np.arange(s))[:, None]
        scores[..., hidden] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    o = np.matmul(scores, v[:, :n].transpose(0, 2, 1, 3)[:, :, None])  # [B, H_kv, G, S, D]
    return o.transpose(0, 3, 1, 2, 4).reshape(b, s, h, d)


def _custom_sdpa_fast(query: np.ndarray, key: np.ndarray, value: np.ndarray, start_pos: int | Callable[[], int],
                      attn_mask: np.ndarray | None, drpout_p: float, is_causal: bool, scale: float | None,
                      out: np.ndarray) -> Callable[[], None] | None:
    """The kernel's compiled pass bound to these arrays, at the position of each call (a decode step's), checked as
    the kernel checks it; None where the kernel would not take that pass or out is not query's shape, C-contiguous."""
    fused = native.loops()
    if fused is None or attn_mask is not None or not 0 < query.shape[1] <= FUSED_ROWS or not query.shape[3]:
        return None
    if not (query.flags.c_contiguous and out.flags.c_contiguous and out.shape == query.shape):
        return None
    _check("llama::custom_sdpa", query, key, value, attn_mask, is_causal)
    at, length, capacity = position(start_pos), query.shape[1], key.shape[1]
    factor = np.float32(1.0 / math.sqrt(query.shape[3]) if scale is None else scale)
    causal, attention = bool(is_causal), fused.rows_attention

    def attend_rows() -> None:
        start = at()
        check_position("llama::custom_sdpa", start, length, capacity)
        attention(query, key, value, start, causal, factor, out)

    return attend_rows


@kernel("llama::custom_sdpa.out", dtypes=("float32",), fast=_custom_sdpa_fast, live=(3,))
def custom_sdpa_out(query: np.ndarray, key: np.ndarray, value: np.ndarray, start_pos: int,
                    attn_mask: np.ndarray | None, drpout_p: float, is_causal: bool, scale: float | None,
                    out: np.ndarray) -> np.ndarray:
    """Attention of query over the caches `key` and `value` (see the module docstring)."""
    _check("llama::custom_sdpa", query, key, value, attn_mask, is_causal)
    check_position("llama::custom_sdpa", start_pos, query.shape[1], key.shape[1])
    out = resize(out, query.shape)
    fused = native.loops() if query.shape[1] <= FUSED_ROWS and attn_mask is None and query.shape[3] else None
    if fused is not None:  # one token, or a few rows: one compiled pass instead of about fifteen numpy calls
        factor = np.float32(1.0 / math.sqrt(query.shape[3]) if scale is None else scale)
        target = out if out.flags.c_contiguous else np.empty(query.shape, np.float32)
        fused.rows_attention(np.ascontiguousarray(query), key, value, start_pos, bool(is_causal), factor, target)
        if target is not out:
            np.copyto(out, target)
        return out
    np.copyto(out, attend(query, key, value, start_pos, attn_mask, is_causal, scale))
    return out


@kernel("llama::sdpa_with_kv_cache.out", dtypes=("float32",))
def sdpa_with_kv_cache_out(query: np.ndarray, key: np.ndarray, value: np.ndarray, key_cache: np.ndarray,
                           value_cache: np.ndarray, start_pos: int, seq_len: int, attn_mask: np.ndarray | None,
                           drpout_p: float, is_causal: bool, scale: float | None, out: np.ndarray) -> np.ndarray:
    """Write key and value into the caches at start_pos, then attend as `custom_sdpa`."""
    if seq_len != query.shape[1] or key.shape[:2] != query.shape[:2]:
        raise KernelError(f"llama::sdpa_with_kv_cache: seq_len {seq_len}, query {list(query.shape)} and key "
                          f"{list(key.shape)} must agree on the number of new tokens")
    _check("llama::sdpa_with_kv_cache", query, key_cache, value_cache, attn_mask, is_causal)
    check_position("llama::sdpa_with_kv_cache", start_pos, seq_len, key_cache.shape[1])
    dummy = np.empty(1, dtype=key.dtype)
    update_cache_out(key, key_cache, start_pos, dummy)
    update_cache_out(value, value_cache, start_pos, dummy)
    return custom_sdpa_out(query, key_cache, value_cache, start_pos, attn_mask, drpout_p, is_causal, scale, out)
