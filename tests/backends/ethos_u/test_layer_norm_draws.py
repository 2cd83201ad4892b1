"""Layer norm over seeded draws of its weights, widths and input scales: every output within one int8 step
of the quantized torch model, through the TOSA reference model.

The draws are hostile on purpose: γ spans six decades (some exactly zero, some negative) beside β up to a
few units, so β/γ ranges far past the accumulator's steps of γ·y; inputs are scaled by 10⁻² to 10² and moved
off zero. Each graph holds several layer norms of distinct widths side by side (one lowering, one run)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("tosa_serializer")
pytest.importorskip("tosa_reference_model")

from etbuild.backends.tosa.runtime.reference import ReferenceGraph  # noqa: E402
from tests.backends.ethos_u.support import lowered, qd  # noqa: E402

WIDTHS = (8, 24, 64, 127, 128, 200)
"""Below and above 127 (C as an int8 or an int16 constant), the tier's encoders' 64 and wider."""


class Branches(nn.Module):
    """Per width C: x → Linear(8, C) (its outputs scaled by a in [10⁻², 10²], moved off zero by b·a) →
    LayerNorm(C) with drawn γ and β, one output each."""

    def __init__(self, widths: tuple[int, ...], g: torch.Generator) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(8, c) for c in widths)
        self.norms = nn.ModuleList(nn.LayerNorm(c) for c in widths)
        with torch.no_grad():
            for fc, norm in zip(self.fcs, self.norms):
                a, b = 10 ** (4 * torch.rand(1, generator=g) - 2), 3 * torch.randn(1, generator=g)
                fc.weight.copy_(torch.randn(fc.weight.shape, generator=g) * a)
                fc.bias.copy_((torch.randn(fc.bias.shape, generator=g) + b) * a)
                norm.weight.copy_(_hostile(norm.weight.shape[0], 6, g))
                norm.bias.copy_(torch.randn(norm.bias.shape, generator=g) * 10 ** (torch.rand(1, generator=g) - 0.5))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(norm(fc(x)) for fc, norm in zip(self.fcs, self.norms))


def _hostile(size: int, decades: float, g: torch.Generator) -> torch.Tensor:
    """Magnitudes log-uniform over `decades` below 3, random signs, about one in ten exactly zero."""
    magnitude = 3 * 10 ** (-decades * torch.rand(size, generator=g))
    sign = torch.where(torch.rand(size, generator=g) < 0.3, -1.0, 1.0)
    return torch.where(torch.rand(size, generator=g) < 0.1, 0.0, magnitude * sign)


def _steps(model: nn.Module, x: torch.Tensor) -> int:
    """The most int8 steps any output of the one TOSA delegate is from the quantized torch model's."""
    found = lowered(model, (x,), "tosa")
    edges = {"quantize_per_tensor", "dequantize_per_tensor"}
    assert len(found.processed) == 1, found.report.outside
    assert {o.operator.split("::")[1] for o in found.report.outside} <= edges, found.report.outside
    quants = [n for n in found.converted.graph.nodes if n.target is qd.quantize_per_tensor.default]
    scale, zero = quants[0].args[1:3]
    q_in = torch.clamp(torch.round(x / scale) + zero, -128, 127).to(torch.int8).numpy()
    (output,) = [n for n in found.converted.graph.nodes if n.op == "output"]
    wanted = {}
    for node, value in zip(output.args[0], found.converted(x)):
        assert node.target is qd.dequantize_per_tensor.default
        scale, zero = node.args[1:3]
        wanted[tuple(value.shape)] = torch.clamp(torch.round(value.detach() / scale) + zero, -128, 127).numpy()
    outs = ReferenceGraph(found.processed[0].blob).run([q_in])
    assert sorted(o.shape for o in outs) == sorted(wanted)  # widths are distinct: outputs match by shape
    return max(int(np.abs(o.astype(np.int32) - wanted[o.shape]).max()) for o in outs)


def _draw(seed: int, widths: tuple[int, ...]) -> int:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 6, 8, generator=g) * torch.logspace(-1, 0, 6).reshape(1, 6, 1)
    return _steps(Branches(widths, g).eval(), x)


@pytest.mark.parametrize("seed", range(4))
def test_layer_norm_is_within_one_step_over_hostile_draws(seed: int) -> None:
    widths = WIDTHS[:3] if seed % 2 == 0 else WIDTHS[3:]
    assert _draw(seed, widths) <= 1


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_vela_compiles_layer_norms_whose_channels_are_scaled_down(target: str) -> None:
    """γ near zero beside β: a per-channel MUL with a 16-bit fraction before the ADD of β."""
    pytest.importorskip("ethosu.vela")
    g = torch.Generator().manual_seed(0)
    found = lowered(Branches(WIDTHS[:3], g).eval(), (torch.randn(1, 6, 8, generator=g),), "ethos-u", target=target)
    assert len(found.processed) == 1, found.report.outside


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 140))
def test_layer_norm_is_within_one_step_over_many_hostile_draws(seed: int) -> None:
    assert _draw(seed, WIDTHS) <= 1
