"""Conformance specs of the etbuild.kernels.llm.cache kernels: the cache ExecuTorch's `llama::update_cache` and
`llama::update_cache_with_indices` (tests/kernels/llm/__init__.py) leave after the write, at start_pos 0, in the
middle and at the end. The `out` of both is a dummy whose value neither kernel sets: only its shape is compared."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tests.kernels import llm as oracle
from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()

# (batch, new tokens, heads, head size, cache positions, start_pos)
SHAPES = [(1, 1, 2, 8, 16, 0), (1, 1, 2, 8, 16, 15), (1, 5, 3, 7, 12, 4), (2, 3, 1, 5, 10, 7)]


def update_cache_cases(g: Gen) -> Iterator[Case]:
    for b, s, h, d, cache, start in SHAPES:
        yield Case((g.t((b, s, h, d)), g.t((b, cache, h, d)), start))


def with_indices_cases(g: Gen) -> Iterator[Case]:
    for b, s, h, d, cache, start in SHAPES:
        indices = torch.stack([torch.randperm(cache, generator=g.g)[:s] for _ in range(b)])
        yield Case((g.t((b, s, h, d)), g.t((b, cache, h, d)), start, indices))


def update_cache_ref(case: Case) -> torch.Tensor:
    value, cache, start = case.args
    if oracle.HAS_ORACLE:
        return oracle.llama_ops().update_cache.default(value, cache, start)
    cache[:, start:start + value.shape[1]] = value
    return torch.empty(1, dtype=value.dtype)


def with_indices_ref(case: Case) -> torch.Tensor:
    value, cache, start, indices = case.args
    if oracle.HAS_ORACLE:
        return oracle.llama_ops().update_cache_with_indices.default(value, cache, start, indices)
    for b in range(value.shape[0]):
        cache[b, indices[b]] = value[b]
    return torch.empty(1, dtype=value.dtype)


SPECS.add("llama::update_cache.out", update_cache_cases, ref=update_cache_ref, outs="tensor", mutates=(1,),
          values=False)
SPECS.add("llama::update_cache_with_indices.out", with_indices_cases, ref=with_indices_ref, outs="tensor",
          mutates=(1,), values=False)
