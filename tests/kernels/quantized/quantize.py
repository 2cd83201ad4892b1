"""Conformance specs of the etbuild.kernels.quantized.quantize kernels: against torch's
functional `quantized_decomposed` ops (torch.ao.quantization.fx._decomposed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from etbuild.lowering import quantized_ops  # noqa: F401  (torch's quantized_decomposed ops)
from tests.kernels.conformance import Case, Gen, SpecTable, bind

SPECS = SpecTable()
qd = torch.ops.quantized_decomposed
RANGES = {torch.int8: (-128, 127), torch.uint8: (0, 255), torch.int16: (-32768, 32767), torch.int32: (-1000, 1000)}
SHAPES = [(), (0,), (7,), (3, 5), (2, 3, 4)]


def ties(g: Gen, scale: float, shape: tuple[int, ...]) -> torch.Tensor:
    """Values on rounding boundaries (k + 0.5 steps), beyond the range, and random ones."""
    k = torch.randint(-300, 300, shape, generator=g.g).to(torch.float32)
    return ((k + 0.5) * scale).to(g.dtype) if g.is_float else k


def quantize_per_tensor_cases(g: Gen) -> Iterator[Case]:
    for shape, (dtype, (lo, hi)) in zip(SHAPES * 2, list(RANGES.items()) * 3):
        yield Case((g.t(shape, low=-4, high=4), 0.03, 3 if lo < 0 else 128, lo, hi, dtype))
    yield Case((ties(g, 0.25, (4, 6)), 0.25, -3, -128, 127, torch.int8))
    yield Case((g.t((5, 3), layout="t"), 1e-3, 0, -128, 127, torch.int8))  # most values clamp
    yield Case((g.t((6,), low=-1, high=1), 1.0 / 3.0, 0, -127, 127, torch.int8))


def quantize_per_tensor_tensor_cases(g: Gen) -> Iterator[Case]:
    for case in quantize_per_tensor_cases(g):
        x, scale, zero, *rest = case.args
        yield Case((x, torch.tensor([scale], dtype=torch.float64), torch.tensor([zero]), *rest))


def dequantize_cases(g: Gen) -> Iterator[Case]:
    lo, hi = RANGES[g.dtype]
    for shape in SHAPES:
        yield Case((g.t(shape, low=lo, high=hi + 1), 0.0371, 5, lo, hi, g.dtype, None))
    yield Case((g.t((3, 4), low=lo, high=hi + 1, layout="t"), 0.5, -2, lo, hi, g.dtype, torch.float16))
    yield Case((g.t((3, 4), low=lo, high=hi + 1), 1e-3, 0, lo, hi, g.dtype, torch.float64))


def dequantize_tensor_cases(g: Gen) -> Iterator[Case]:
    for case in dequantize_cases(g):
        q, scale, zero, *rest = case.args
        yield Case((q, torch.tensor([scale], dtype=torch.float32), torch.tensor([zero]), *rest))


def _channel_params(g: Gen, channels: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    scales = (torch.rand(channels, generator=g.g, dtype=torch.float64) * 0.1 + 1e-3).to(dtype)
    zeros = torch.randint(-4, 5, (channels,), generator=g.g)
    return scales, zeros


def quantize_per_channel_cases(g: Gen) -> Iterator[Case]:
    for shape, axis in [((4, 3), 0), ((2, 5, 3), 1), ((3, 2, 4), -1), ((0, 3), 1)]:
        scales, zeros = _channel_params(g, shape[axis])
        yield Case((g.t(shape), scales, zeros, axis, -128, 127, torch.int8))
    scales, zeros = _channel_params(g, 4, torch.float64)
    yield Case((g.t((4, 6), layout="t"), scales, zeros, 0, -127, 127, torch.int8))
    yield Case((ties(g, 0.25, (3, 4)), torch.full((3,), 0.25), torch.zeros(3, dtype=torch.int64), 0, 0, 255,
                torch.uint8))


def dequantize_per_channel_cases(g: Gen) -> Iterator[Case]:
    lo, hi = RANGES[g.dtype]
    for shape, axis in [((4, 3), 0), ((2, 5, 3), 1), ((3, 2, 4), 2), ((0, 3), 1)]:
        scales, zeros = _channel_params(g, shape[axis])
        yield Case((g.t(shape, low=lo, high=hi + 1), scales, zeros, axis, lo, hi, g.dtype, None))
    scales, _ = _channel_params(g, 5)
    yield Case((g.t((5, 4), low=lo, high=hi + 1, layout="t"), scales, None, 0, lo, hi, g.dtype, None))
    scales, zeros = _channel_params(g, 4, torch.float64)
    yield Case((g.t((3, 4), low=lo, high=hi + 1), scales, zeros, 1, lo, hi, g.dtype, torch.float32))


def _token_params(g: Gen, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows = (*x.shape[:-1], 1)
    scales = torch.rand(rows, generator=g.g, dtype=torch.float64) * 0.05 + 1e-3
    return scales, torch.randint(-10, 11, rows, generator=g.g)


def quantize_per_token_cases(g: Gen) -> Iterator[Case]:
    for shape in [(3, 8), (2, 3, 5), (1, 4)]:
        x = g.t(shape)
        yield Case((x, *_token_params(g, x), -128, 127, torch.int8))
    x = ties(g, 0.25, (2, 4))
    yield Case((x, torch.full((2, 1), 0.25, dtype=torch.float64), torch.tensor([[1], [-2]]), -128, 127, torch.int8))


def dequantize_per_token_cases(g: Gen) -> Iterator[Case]:
    lo, hi = RANGES[g.dtype]
    for shape in [(3, 8), (2, 3, 5), (1, 4)]:
        q = g.t(shape, low=lo, high=hi + 1)
        yield Case((q, *_token_params(g, q), lo, hi, g.dtype, torch.float32))


def _reference(op: Any) -> Any:
    """torch's functional op on a case (keyword-only arguments by name)."""

    def ref(case: Case) -> torch.Tensor:
        pos, kw = bind(op, case.args)
        return op(*pos, **kw)

    return ref


QUANTIZED = ("uint8", "int8", "int16", "int32")
SPECS.add("quantized_decomposed::quantize_per_tensor.out", quantize_per_tensor_cases,
          ref=_reference(qd.quantize_per_tensor.default), outs="tensor")
SPECS.add("quantized_decomposed::quantize_per_tensor.Tensor_out", quantize_per_tensor_tensor_cases,
          ref=_reference(qd.quantize_per_tensor.tensor), outs="tensor")
SPECS.add("quantized_decomposed::dequantize_per_tensor.out", dequantize_cases,
          ref=_reference(qd.dequantize_per_tensor.default), outs="tensor")
SPECS.add("quantized_decomposed::dequantize_per_tensor.Tensor_out", dequantize_tensor_cases,
          ref=_reference(qd.dequantize_per_tensor.tensor), outs="tensor")
SPECS.add("quantized_decomposed::quantize_per_channel.out", quantize_per_channel_cases,
          ref=_reference(qd.quantize_per_channel.default), outs="tensor")
SPECS.add("quantized_decomposed::dequantize_per_channel.out", dequantize_per_channel_cases,
          ref=_reference(qd.dequantize_per_channel.default), outs="tensor")
SPECS.add("quantized_decomposed::quantize_per_token.out", quantize_per_token_cases,
          ref=_reference(qd.quantize_per_token.default), outs="tensor")
SPECS.add("quantized_decomposed::dequantize_per_token.out", dequantize_per_token_cases,
          ref=_reference(qd.dequantize_per_token.default), outs="tensor")
