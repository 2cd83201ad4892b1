"""etbuild.quantize.observers: the percentile and mse observers and the histogram they keep."""

from __future__ import annotations

import pytest
import torch

from etbuild.quantize import flow
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.observers import BINS, MseObserver, PercentileObserver
from etbuild.quantize.schemes import EPS, OBSERVERS, static_activation
from etbuild.zoo import mlp


def observer(name: str) -> torch.nn.Module:
    """The observer prepare makes of a static activation spec with observer `name`."""
    spec = static_activation(name)
    return spec.observer_or_fake_quant_ctr(dtype=spec.dtype, quant_min=spec.quant_min, quant_max=spec.quant_max,
                                           qscheme=spec.qscheme)


def mse_of(obs: torch.nn.Module, x: torch.Tensor) -> float:
    scale, zero = (float(v) for v in obs.calculate_qparams())
    q = torch.clamp(torch.round(x / scale) + zero, -128, 127)
    return float(((q - zero) * scale - x).square().mean())


def test_the_histogram_grows_by_merging_bins_and_keeps_every_count() -> None:
    obs = observer("percentile")
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(1000, generator=g), torch.randn(1000, generator=g) * 10 + 30, -torch.rand(10) * 500]
    for x in batches:
        obs(x)
    every = torch.cat(batches)
    assert float(obs.histogram.sum()) == every.numel()
    assert float(obs.min_val) == float(every.min()) and float(obs.max_val) == float(every.max())
    top = float(obs.origin + BINS * obs.width)
    assert float(obs.origin) <= float(every.min()) and float(every.max()) <= top
    direct = torch.histc(every.double(), BINS, float(obs.origin), top)  # the same grid, counted at once
    # the same counts, but for a value on a bin's edge that float32 arithmetic put on its other side
    assert float((obs.histogram.cumsum(0) - direct.cumsum(0)).abs().max()) <= 2


def test_percentile_clips_the_rarest_values() -> None:
    obs = observer("percentile")
    x = torch.cat([torch.linspace(-1, 1, 100_000), torch.tensor([50.0, -40.0])])  # 2 in 100,002 beyond
    obs(x)
    scale, zero = obs.calculate_qparams()
    low, high = (-128 - int(zero)) * float(scale), (127 - int(zero)) * float(scale)
    bin_width = 90 / BINS  # the histogram spans [-40, 50]; a percentile is read inside its bin
    assert low == pytest.approx(-1, abs=bin_width) and high == pytest.approx(1, abs=bin_width)
    assert isinstance(obs, PercentileObserver)


def test_mse_picks_the_range_with_the_least_squared_error() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200_000, generator=g) ** 3  # heavy tails: the extremes far from the bulk
    chosen, full = observer("mse"), observer("minmax")
    chosen(x)
    full(x)
    assert isinstance(chosen, MseObserver)
    assert float(chosen.calculate_qparams()[0]) < float(full.calculate_qparams()[0])
    assert mse_of(chosen, x) < mse_of(full, x) * 0.9


def test_an_observer_that_saw_nothing_gives_minmax_s_parameters() -> None:
    scale, zero = observer("mse").calculate_qparams()
    assert (float(scale), int(zero)) == (1.0, 0)


def test_a_constant_input_gets_the_smallest_scale() -> None:
    obs = observer("percentile")
    obs(torch.zeros(64))
    scale, zero = obs.calculate_qparams()
    assert float(scale) == pytest.approx(EPS) and -128 <= int(zero) <= 127


@pytest.mark.parametrize("name", list(OBSERVERS))
def test_every_observer_converts_to_per_tensor_int8_quantize_ops(name: str) -> None:
    torch.manual_seed(0)
    model = mlp([16, 32, 8]).eval()
    ep = torch.export.export(model, (torch.randn(2, 16),))
    samples = [(torch.randn(2, 16),) for _ in range(4)]
    converted = flow.quantize(ep, flow.Plan(SchemeMap("int8-static", observer=name)), samples)
    qd = torch.ops.quantized_decomposed
    quantize = [n for n in converted.graph.nodes if n.target is qd.quantize_per_tensor.default]
    assert quantize and all(n.args[3:] == (-128, 127, torch.int8) for n in quantize)
    assert all(float(n.args[1]) >= EPS for n in quantize)
    ops = {n.target for n in converted.graph.nodes if n.op == "call_function"}
    assert ops <= {qd.quantize_per_tensor.default, qd.dequantize_per_tensor.default,
                   qd.dequantize_per_channel.default, torch.ops.aten.linear.default, torch.ops.aten.relu.default}


def test_an_unknown_observer_lists_the_observers() -> None:
    with pytest.raises(ValueError, match="unknown observer 'minmix'; expected one of minmax, histogram, percentile"):
        static_activation("minmix")
