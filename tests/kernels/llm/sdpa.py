"""Conformance specs of the etbuild.kernels.llm.sdpa kernels: against ExecuTorch's `llama::custom_sdpa` and
`llama::sdpa_with_kv_cache` (tests/kernels/llm/__init__.py) on random inputs: grouped-query attention, causal or
not, start_pos 0 and > 0, one new token and several, odd head sizes, with a mask and a scale."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tests.kernels import llm as oracle
from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()

# (batch, new tokens, query heads, cache heads, head size, cache positions, start_pos)
SHAPES = [(1, 1, 4, 2, 8, 16, 0), (1, 1, 4, 2, 8, 16, 9), (1, 5, 6, 2, 7, 12, 3), (2, 3, 4, 4, 5, 10, 0),
          (1, 4, 8, 1, 16, 20, 16), (1, 7, 3, 3, 3, 9, 2), (1, 1, 6, 3, 9, 11, 4), (2, 1, 6, 3, 9, 11, 10)]


def _options(g: Gen, k: int, s: int, cache: int) -> tuple[torch.Tensor | None, bool, float | None]:
    """Mask, causal and scale of the k-th case: causal, plain, masked, scaled in turn."""
    kind = k % 4
    mask = g.t((s, cache), torch.float32, low=-2, high=2) if kind == 2 else None
    return mask, kind in (0, 3), 0.3 if kind == 3 else None


def custom_sdpa_cases(g: Gen) -> Iterator[Case]:
    for k, (b, s, h, h_kv, d, cache, start) in enumerate(SHAPES):
        mask, causal, scale = _options(g, k, s, cache)
        q, kc, vc = g.t((b, s, h, d)), g.t((b, cache, h_kv, d)), g.t((b, cache, h_kv, d))
        yield Case((q, kc, vc, start, mask, 0.0, causal, scale))


def sdpa_with_kv_cache_cases(g: Gen) -> Iterator[Case]:
    for k, (b, s, h, h_kv, d, cache, start) in enumerate(SHAPES):
        mask, causal, scale = _options(g, k, s, cache)
        q, key, value = g.t((b, s, h, d)), g.t((b, s, h_kv, d)), g.t((b, s, h_kv, d))
        yield Case((q, key, value, g.t((b, cache, h_kv, d)), g.t((b, cache, h_kv, d)), start, s, mask, 0.0,
                    causal, scale))


def custom_sdpa_ref(case: Case) -> torch.Tensor:
    if oracle.HAS_ORACLE:
        return oracle.llama_ops().custom_sdpa.default(*case.args)
    return oracle.attention(*case.args[:5], *case.args[6:])


def sdpa_with_kv_cache_ref(case: Case) -> torch.Tensor:
    if oracle.HAS_ORACLE:
        return oracle.llama_ops().sdpa_with_kv_cache.default(*case.args)
    q, key, value, kc, vc, start, s, mask, _, causal, scale = case.args
    kc[:, start:start + s], vc[:, start:start + s] = key, value
    return oracle.attention(q, kc, vc, start, mask, causal, scale)


SPECS.add("llama::custom_sdpa.out", custom_sdpa_cases, ref=custom_sdpa_ref, outs="tensor", tol=10)
SPECS.add("llama::sdpa_with_kv_cache.out", sdpa_with_kv_cache_cases, ref=sdpa_with_kv_cache_ref, outs="tensor",
          tol=10, mutates=(3, 4))
