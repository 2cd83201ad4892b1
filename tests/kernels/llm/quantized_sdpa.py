"""Conformance specs of etbuild.kernels.llm.quantized_sdpa: `llama::custom_quantized_sdpa` against attention (torch
ops, tests/kernels/llm/__init__.py) of the dequantized query and caches: int8 codes with a float32 scale and an int8
zero point per token and head; grouped-query heads, causal or masked, one new token and several. ExecuTorch 1.5.1
registers no eager kernel for it (its runtime is compared on export_llm's program: tests/interop/test_export_llm.py)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tests.kernels import llm as oracle
from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()

# (batch, new tokens, query heads, cache heads, head size, cache positions, start_pos)
SHAPES = [(1, 1, 4, 2, 8, 16, 0), (1, 1, 4, 2, 8, 16, 15), (1, 5, 6, 2, 7, 12, 3), (2, 3, 4, 4, 5, 10, 0),
          (1, 4, 8, 1, 16, 20, 16)]


def _quantized(g: Gen, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """int8 codes, a float32 scale and an int8 zero point per token and head."""
    scales = g.t((*shape[:3], 1), torch.float32, low=1e-3, high=0.05)
    return g.t(shape, torch.int8, low=-128, high=127), scales, g.t((*shape[:3], 1), torch.int8, low=-20, high=20)


def custom_quantized_sdpa_cases(g: Gen) -> Iterator[Case]:
    for k, (b, s, h, h_kv, d, cache, start) in enumerate(SHAPES):
        (q, qs, qz), (kc, ks, kz), (vc, vs, vz) = (_quantized(g, (b, s, h, d)), _quantized(g, (b, cache, h_kv, d)),
                                                   _quantized(g, (b, cache, h_kv, d)))
        mask = g.t((s, cache), torch.float32, low=-2, high=2) if k == 2 else None
        yield Case((q, kc, vc, start, mask, 0.0, mask is None, 0.3 if k == 3 else None, qz, qs, kz, ks, vz, vs, False))


def _dequantized(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    return (codes.float() - zero.float()) * scale


def custom_quantized_sdpa_ref(case: Case) -> torch.Tensor:
    q, kc, vc, start, mask, _, causal, scale, qz, qs, kz, ks, vz, vs, _ = case.args
    return oracle.attention(_dequantized(q, qs, qz), _dequantized(kc, ks, kz), _dequantized(vc, vs, vz), start, mask,
                            causal, scale)


SPECS.add("llama::custom_quantized_sdpa.out", custom_quantized_sdpa_cases, ref=custom_quantized_sdpa_ref,
          outs="tensor", tol=10)
