"""The quantizer mode the Ethos-U and TOSA backends ask for: ExecuTorch's EthosUQuantizer scheme
(int8 affine activations, int8 per-channel symmetric weights in [-127, 127], int32 biases)."""

from __future__ import annotations

import torch
from torch import nn

from etbuild.quantize import flow
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.schemes import DEFAULT_MODE, MODES, requested_mode
from etbuild.recipe import BackendConfig

qd = torch.ops.quantized_decomposed


def test_the_mode_comes_from_the_listed_backends() -> None:
    assert requested_mode([]).name == DEFAULT_MODE
    assert requested_mode([BackendConfig("xnnpack")]).name == DEFAULT_MODE
    assert requested_mode([BackendConfig("xnnpack"), BackendConfig("ethos-u")]) == MODES["npu-int8"]
    assert requested_mode([BackendConfig("tosa")]).int32_bias


def _converted(mode: str) -> torch.fx.GraphModule:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 4)).eval()
    x = (torch.randn(1, 3, 8, 8),)
    ep = torch.export.export(model, x, strict=False)
    plan = flow.Plan(SchemeMap("int8-static"), True, mode=MODES[mode])
    return flow.quantize(ep, plan, [x, (torch.randn(1, 3, 8, 8) + 1,)])


def _value(model: torch.fx.GraphModule, node: torch.fx.Node) -> torch.Tensor:
    return getattr(model, node.target)


def test_npu_mode_gives_int32_biases_at_input_times_weight_scale() -> None:
    model = _converted("npu-int8")
    weights = [n for n in model.graph.nodes if n.target is qd.dequantize_per_channel.default]
    int8 = [n for n in weights if _value(model, n.args[0]).dtype is torch.int8]
    int32 = [n for n in weights if _value(model, n.args[0]).dtype is torch.int32]
    assert len(int8) == 2 and len(int32) == 2
    for w in int8:
        assert tuple(w.args[3:6]) == (0, -127, 127) and _value(model, w.args[0]).abs().max() <= 127
    for bias in int32:
        assert tuple(bias.args[3:6]) == (0, -(2**31 - 1), 2**31 - 1)
        user = next(iter(bias.users))
        x_dq, w_dq = user.args[0], user.args[1]
        expected = x_dq.args[1] * _value(model, w_dq.args[1])
        torch.testing.assert_close(_value(model, bias.args[1]).to(torch.float32), expected.to(torch.float32))
        assert not _value(model, bias.args[2]).any()
    zero_points = [n.args[2] for n in model.graph.nodes if n.target is qd.quantize_per_tensor.default]
    assert any(z != 0 for z in zero_points)  # affine activations


def test_default_mode_keeps_float_biases() -> None:
    model = _converted(DEFAULT_MODE)
    stored = [_value(model, n.args[0]).dtype for n in model.graph.nodes
              if n.target is qd.dequantize_per_channel.default]
    assert stored == [torch.int8, torch.int8]
