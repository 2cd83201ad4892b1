"""etbuild.quantize.gptq: int4 group weights with their rounding error compensated on calibration inputs."""

from __future__ import annotations

import pytest
import torch

from etbuild.quantize import flow
from etbuild.quantize.gptq import gptq_quantize, recording
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.schemes import INT4
from etbuild.quantize.weights import group_quantize

QRANGE = (-8, 7)


def _correlated(rows: int, features: int, seed: int) -> torch.Tensor:
    """Inputs whose features are correlated (as a layer's activations are): where compensation pays."""
    generator = torch.Generator().manual_seed(seed)
    mix = torch.randn(features, features, generator=torch.Generator().manual_seed(99)) / features**0.5
    return torch.randn(rows, features, generator=generator) @ (mix + torch.eye(features))


def _restored(q: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """What XNNPACK computes with: torch's own group dequantize of the int8 values."""
    zeros = torch.zeros_like(scales, dtype=torch.int64)
    return torch.ops.quantized_decomposed.dequantize_per_channel_group(q, scales, zeros, *QRANGE, torch.int8, group,
                                                                        torch.float32)


@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_beats_rounding_on_held_out_inputs(act_order: bool) -> None:
    weight = torch.randn(48, 128, generator=torch.Generator().manual_seed(0)) * 0.05
    calibration, held_out = _correlated(1024, 128, seed=1), _correlated(1024, 128, seed=2)
    hessian = 2 * calibration.T @ calibration / len(calibration)
    q, scales = gptq_quantize(weight, hessian, 32, QRANGE, act_order=act_order)
    assert q.dtype == torch.int8 and q.shape == (48, 128) and scales.shape == (48, 4) and scales.dtype == torch.float32
    assert int(q.min()) >= -8 and int(q.max()) <= 7
    assert torch.equal(scales, scales.to(torch.bfloat16).float()) and (scales > 0).all()
    plain_q, plain_scales = group_quantize(weight, 32, QRANGE, bf16_scales=True, fit=True)
    error = ((held_out @ (weight - _restored(q, scales, 32)).T) ** 2).mean()
    plain = ((held_out @ (weight - _restored(plain_q, plain_scales, 32)).T) ** 2).mean()
    assert error < 0.85 * plain  # ~0.66 (in order), ~0.73 (act order) here
    again = gptq_quantize(weight, hessian, 32, QRANGE, act_order=act_order)
    assert torch.equal(again[0], q) and torch.equal(again[1], scales)  # deterministic


def test_a_column_that_never_saw_input_is_zero_and_a_singular_hessian_still_factors() -> None:
    weight = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    inputs = _correlated(16, 64, seed=3)  # 16 rows: H has rank 16 of 64
    inputs[:, 5] = 0
    q, scales = gptq_quantize(weight, 2 * inputs.T @ inputs / 16, 32, QRANGE)
    assert (q[:, 5] == 0).all() and torch.isfinite(scales).all()
    assert torch.isfinite(_restored(q, scales, 32)).all()


class _Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 32)
        with torch.no_grad():
            for layer in (self.up, self.down):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def test_a_linear_stack_quantized_with_gptq_is_closer_to_float_on_held_out_inputs() -> None:
    model = _Stack().eval()
    ep = torch.export.export(model, (_correlated(32, 64, seed=0),))
    calibration = [(_correlated(32, 64, seed=10 + i),) for i in range(8)]
    held_out = _correlated(256, 64, seed=5).split(32)
    errors = {}
    for weights in flow.WEIGHTS:
        plan = flow.Plan(SchemeMap(INT4), group_size=32, weights=weights)
        quantized = flow.quantize(ep, plan, calibration)
        assert not [n for n in quantized.graph.nodes if str(n.target).startswith("_etbuild_gptq_tap")]
        with torch.no_grad():
            errors[weights] = sum(float(((quantized(x) - model(x)) ** 2).mean()) for x in held_out)
    assert errors[flow.GPTQ] < 0.8 * errors[flow.ROUNDED]


def test_recording_shares_one_hessian_between_linears_that_read_one_value() -> None:
    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 8), torch.nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x)

    gm = torch.export.export(Two(), (torch.randn(5, 16),)).module()
    x = torch.randn(5, 16)
    with recording(gm, lambda n: True) as hessians:
        gm(x)
    linears = list(hessians.inputs)
    assert len(linears) == 2 and len(hessians.sums) == 1
    torch.testing.assert_close(hessians.of(linears[0]), 2 * x.T @ x / 5)
    torch.testing.assert_close(hessians.of(linears[1]), hessians.of(linears[0]))
    assert not [n for n in gm.graph.nodes if str(n.target).startswith("_etbuild_gptq_tap")]
