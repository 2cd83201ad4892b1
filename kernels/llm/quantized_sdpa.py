"""`llama::custom_quantized_sdpa.out`: attention over an int8 KV cache (export_llm's `quantize_kv_cache`).

Layout as `custom_sdpa`'s (query `[B, S, H, D]`, caches `[B, S_max, H_kv, D]`), every one of them int8 and
quantized per token and head, asymmetric: each has a float32 scale and an int8 zero point of its shape with a last
dim of 1 (`choose_qparams_per_token_asymmetric` → `quantize_per_token` made the query's; the cache's scales and
zero points are state beside the cache, written with `llama::update_cache`). The result is float32: attention of
the dequantized query over the dequantized filled part of the caches, `(x - zero_point) * scale` (ExecuTorch's
kernel computes the same products in int8 GEMMs and rescales; the last bits of the sums may differ). What the
arguments mean besides is `custom_sdpa`'s (`is_causal`, `attn_mask` over the whole cache, `scale`).
`is_seq_at_dim_2` (caches `[B, H_kv, S_max, D]`) is not taken: export_llm's programs keep the sequence at dim 1.
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.llm.cache import check_position
from etbuild.kernels.llm.sdpa import attend
from etbuild.runtime.kernel_registry import kernel
from etbuild.runtime.tensor import resize

OP = "llama::custom_quantized_sdpa"


def _dequantized(name: str, x: np.ndarray, zero_point: np.ndarray | None, scale: np.ndarray | None,
                 rows: int) -> np.ndarray:
    """float32 `(x[:, :rows] - zero_point) * scale` of an int8 tensor quantized per token and head."""
    if zero_point is None or scale is None:
        raise KernelError(f"{OP}: {name} needs its scale and zero point")
    if x.dtype != np.int8 or scale.dtype != np.float32 or zero_point.dtype != np.int8:
        raise KernelError(f"{OP}: {name} must be int8 with a float32 scale and an int8 zero point, got {x.dtype}, "
                          f"{scale.dtype}, {zero_point.dtype}")
    if x.ndim != 4 or scale.shape != (*x.shape[:3], 1) or zero_point.shape != scale.shape:
        raise KernelError(f"{OP}: {name} {list(x.shape)} needs a scale and zero point of shape "
                          f"{[*x.shape[:3], 1]}, got {list(scale.shape)} and {list(zero_point.shape)}")
    codes = x[:, :rows].astype(np.float32)
    codes -= zero_point[:, :rows]
    codes *= scale[:, :rows]
    return codes


@kernel("llama::custom_quantized_sdpa.out", dtypes=("int8",))
def custom_quantized_sdpa_out(query: np.ndarray, key: np.ndarray, value: np.ndarray, start_pos: int,
                              attn_mask: np.ndarray | None, drpout_p: float, is_causal: bool, scale: float | None,
                              q_zero_point: np.ndarray | None, q_scale: np.ndarray | None,
                              k_zero_point: np.ndarray | None, k_scale: np.ndarray | None,
                              v_zero_point: np.ndarray | None, v_scale: np.ndarray | None, is_seq_at_dim_2: bool,
                              out: np.ndarray) -> np.ndarray:
    """Attention of the int8 query over the int8 caches (see the module docstring), float32 `[B, S, H, D]`."""
    if is_seq_at_dim_2:
        raise KernelError(f"{OP}: caches with the sequence at dim 2 are not supported (export_llm keeps it at dim 1)")
    if query.ndim != 4 or key.ndim != 4 or key.shape != value.shape:
        raise KernelError(f"{OP}: query must be 4-d and the key and value caches 4-d of one shape, got "
                          f"{list(query.shape)}, {list(key.shape)}, {list(value.shape)}")
    if query.shape[0] != key.shape[0] or query.shape[3] != key.shape[3] or key.shape[2] == 0 or \
            query.shape[2] % key.shape[2]:
        raise KernelError(f"{OP}: query {list(query.shape)} does not fit caches {list(key.shape)} (batch and head "
                          "size must match, query heads a multiple of cache heads)")
    if attn_mask is not None and (is_causal or attn_mask.ndim != 2 or attn_mask.shape != (query.shape[1], key.shape[1])
                                  or attn_mask.dtype.kind != "f"):
        raise KernelError(f"{OP}: attn_mask must be float [S, S_max] = {[query.shape[1], key.shape[1]]} and "
                          "exclude is_causal")
    if attn_mask is None:
        check_position(OP, start_pos, query.shape[1], key.shape[1])
    rows = key.shape[1] if attn_mask is not None else start_pos + query.shape[1]
    q = _dequantized("query", query, q_zero_point, q_scale, query.shape[1])
    k = _dequantized("key", key, k_zero_point, k_scale, rows)
    v = _dequantized("value", value, v_zero_point, v_scale, rows)
    out = resize(out, query.shape)
    np.copyto(out, attend(q, k, v, start_pos, attn_mask, is_causal, scale))
    return out
