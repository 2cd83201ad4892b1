"""etbuild.quantize.fallback: what convert makes of an observer, applied to a tensor."""

from __future__ import annotations

import torch

from etbuild.quantize.fallback import fake_quantize
from etbuild.quantize.schemes import DYNAMIC, STATIC, specs


def observer(spec, x: torch.Tensor) -> torch.nn.Module:
    """The observer prepare makes of `spec`, after seeing `x`."""
    kwargs = {"dtype": spec.dtype, "quant_min": spec.quant_min, "quant_max": spec.quant_max, "qscheme": spec.qscheme}
    if spec.ch_axis is not None and spec.qscheme == torch.per_channel_symmetric:
        kwargs["ch_axis"] = spec.ch_axis
    if spec.is_dynamic:
        kwargs["is_dynamic"] = True
    obs = spec.observer_or_fake_quant_ctr(**kwargs)
    obs(x)
    return obs


def test_per_tensor_static_rounds_to_the_observed_grid() -> None:
    x = torch.linspace(-1.0, 1.0, 101)
    obs = observer(specs(STATIC, per_channel=False).output, x)
    out = fake_quantize(obs, x)
    scale = float(obs.calculate_qparams()[0])
    assert scale > 0 and not torch.equal(out, x)
    assert (out - x).abs().max() <= scale / 2 + 1e-6
    assert torch.allclose(out / scale, (out / scale).round(), atol=1e-3)


def test_per_channel_weights_have_one_scale_per_row() -> None:
    w = torch.tensor([[1.0, -0.5, 0.25], [100.0, 50.0, -100.0]])
    out = fake_quantize(observer(specs(STATIC, per_channel=True).weight, w), w)
    assert (out[0] - w[0]).abs().max() <= 1.0 / 127  # the small row keeps its own fine step
    assert (out[1] - w[1]).abs().max() <= 100.0 / 127


def test_dynamic_activations_choose_their_parameters_from_the_tensor() -> None:
    spec = specs(DYNAMIC, per_channel=False).inputs
    obs = observer(spec, torch.zeros(3))  # what it saw while observing does not matter
    x = torch.tensor([-3.0, 0.0, 1.5, 3.0])
    out = fake_quantize(obs, x)
    assert (out - x).abs().max() <= 6.0 / 255
