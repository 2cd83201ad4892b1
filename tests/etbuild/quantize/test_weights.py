"""etbuild.quantize.weights: group-wise int weights and their bfloat16 scales."""

from __future__ import annotations

import torch

from etbuild.quantize.weights import EPS, bf16_ceil, group_quantize


def test_group_quantize_scales_each_group_by_its_largest_value() -> None:
    weight = torch.tensor([[1.0, -2.0, 0.5, 0.3], [0.0, 0.0, 7.0, -7.0]])
    q, scales = group_quantize(weight, group_size=2, qrange=(-8, 7))
    assert scales.shape == (2, 2) and q.dtype == torch.int8
    torch.testing.assert_close(scales, torch.tensor([[0.25, 0.5 / 7], [EPS, 1.0]]))
    assert q.tolist() == [[4, -8, 7, 4], [0, 0, 7, -7]]
    restored = (q.float().reshape(2, 2, 2) * scales.unsqueeze(-1)).reshape(2, 4)
    assert (restored - weight).abs().max() <= scales.max() / 2


def test_bf16_ceil_rounds_up_to_a_bfloat16_value() -> None:
    scales = torch.tensor([1.0, 1.0 + 2**-10, 0.3, 3e-5])
    up = bf16_ceil(scales)
    assert up[0] == 1.0  # already a bfloat16 value
    assert up[1] == 1.0 + 2**-7  # the next bfloat16 above 1 (7 mantissa bits)
    assert torch.equal(up, up.to(torch.bfloat16).float())
    assert (up >= scales).all() and (up <= scales * (1 + 2**-7)).all()


def test_bf16_scales_keep_every_value_in_range() -> None:
    weight = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    q, scales = group_quantize(weight, group_size=32, qrange=(-8, 7), bf16_scales=True)
    assert torch.equal(scales, scales.to(torch.bfloat16).float())
    assert int(q.min()) >= -8 and int(q.max()) <= 7


def _group_errors(weight: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    restored = q.float().reshape(*scales.shape, group) * scales.unsqueeze(-1)
    return ((restored - weight.reshape(*scales.shape, group)) ** 2).sum(-1)


def test_fitted_scales_never_lose_to_the_full_range_and_win_on_gaussian_weights() -> None:
    weight = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    full_q, full_scales = group_quantize(weight, 32, (-8, 7), bf16_scales=True)
    fit_q, fit_scales = group_quantize(weight, 32, (-8, 7), bf16_scales=True, fit=True)
    full, fitted = _group_errors(weight, full_q, full_scales, 32), _group_errors(weight, fit_q, fit_scales, 32)
    assert (fitted <= full * (1 + 1e-6)).all()  # the full range is a candidate
    assert fitted.sum() < 0.92 * full.sum()  # clipping the tails of Gaussian groups pays in int4 (~12% here)
    assert torch.equal(fit_scales, fit_scales.to(torch.bfloat16).float())
    assert (fit_scales <= full_scales).all() and (fit_scales < full_scales).any()
