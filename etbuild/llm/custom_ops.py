"""ExecuTorch's `llama::update_cache` and `llama::custom_sdpa` as torch operators, for export without executorch.

The schemas are the ones ExecuTorch's custom-op library registers (`../shared/LLM.md`), functional
forms and `.out` variants, so a graph that calls them lowers to the same KernelCalls an export_llm
program makes. `define()` registers them under the `llama` namespace unless torch already has them
(executorch's `extension.llm.custom_ops.custom_ops` imported first); a process that defines ours
and then loads executorch's library fails on the duplicate, so oracle code calls `release()` first.
Layout: sequence at dim 1 — query `[B, S, H, D]`, caches `[B, S_max, H_kv, D]`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

NAMESPACE = "llama"
_UPDATE = "Tensor value, Tensor(a!) cache, SymInt start_pos"
_SDPA = ("Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None, float drpout_p=0., "
         "bool is_causal=False, float? scale=None")
SCHEMAS = (
    f"update_cache({_UPDATE}) -> Tensor",
    f"update_cache.out({_UPDATE}, *, Tensor(b!) out) -> Tensor(b!)",
    f"custom_sdpa({_SDPA}) -> Tensor",
    f"custom_sdpa.out({_SDPA}, *, Tensor(a!) out) -> Tensor(a!)",
)
_LIBRARIES: list[Any] = []


def define() -> None:
    """Register the `llama` operators (eager and fake kernels) unless torch already has them."""
    if _LIBRARIES or _registered():
        return
    library = torch.library.Library(NAMESPACE, "FRAGMENT")
    for schema in SCHEMAS:
        library.define(schema)
    library.impl("update_cache", update_cache, "CompositeExplicitAutograd")
    library.impl("custom_sdpa", custom_sdpa, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::update_cache", _update_cache_fake, lib=library)
    torch.library.register_fake(f"{NAMESPACE}::custom_sdpa", _custom_sdpa_fake, lib=library)
    _LIBRARIES.append(library)


def release() -> None:
    """Remove the operators `define()` registered, so that executorch's library can register its own."""
    while _LIBRARIES:
        _LIBRARIES.pop()._destroy()


def _registered() -> bool:
    packet = getattr(torch.ops, NAMESPACE)
    try:
        return all(hasattr(getattr(packet, name), "default") for name in ("update_cache", "custom_sdpa"))
    except AttributeError:
        return False


def update_cache(value: torch.Tensor, cache: torch.Tensor, start_pos: int) -> torch.Tensor:
    """Write `value` `[B, S, H, D]` into `cache[:, start_pos : start_pos + S]` in place; a 1-element dummy result."""
    _check_update(value, cache, start_pos)
    cache[:, start_pos:start_pos + value.shape[1]] = value
    return torch.empty((1,), dtype=value.dtype)


def _update_cache_fake(value: torch.Tensor, cache: torch.Tensor, start_pos: int) -> torch.Tensor:
    return value.new_empty((1,))


def _check_update(value: torch.Tensor, cache: torch.Tensor, start_pos: int) -> None:
    if value.dim() != 4 or cache.dim() != 4 or value.shape[0] != cache.shape[0] or value.shape[2:] != cache.shape[2:]:
        raise ValueError(f"update_cache: value {list(value.shape)} does not fit cache {list(cache.shape)}")
    if not 0 <= start_pos <= cache.shape[1] - value.shape[1]:
        raise ValueError(f"update_cache: positions {start_pos}..{start_pos + value.shape[1] - 1} "
                         f"are past the cache of {cache.shape[1]}")


def custom_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, start_pos: int,
                attn_mask: torch.Tensor | None = None, drpout_p: float = 0.0, is_causal: bool = False,
                scale: float | None = None) -> torch.Tensor:
    """Attention of `query` (positions `start_pos …`) over cache positions `0 … start_pos + S - 1`.

    With `is_causal` each query row `i` sees positions up to `start_pos + i`; otherwise `attn_mask`
    (`[S, start_pos + S]`, additive or boolean) masks them. Grouped-query heads share key heads.
    """
    length = start_pos + query.shape[1]
    q = query.transpose(1, 2)
    k = key[:, :length].transpose(1, 2)
    v = value[:, :length].transpose(1, 2)
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    mask = attn_mask
    if is_causal:
        rows = torch.arange(query.shape[1]).unsqueeze(1) + start_pos
        mask = torch.arange(length).unsqueeze(0) <= rows
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).contiguous()


def _custom_sdpa_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, start_pos: int,
                      attn_mask: torch.Tensor | None = None, drpout_p: float = 0.0, is_causal: bool = False,
                      scale: float | None = None) -> torch.Tensor:
    return torch.empty_like(query)
