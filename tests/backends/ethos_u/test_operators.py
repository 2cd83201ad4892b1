"""The operators beyond convolutions and pools: lookup tables, softmax, concatenation, multiply, ceil-mode
pools. Each TOSA graph runs in the reference model against the quantized torch model (within one
quantization step), and compiles with Vela for a U55 and a U85."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("tosa_serializer")
pytest.importorskip("tosa_reference_model")
pytest.importorskip("ethosu.vela")

from tests.backends.ethos_u.support import lowered, only_edges_outside, steps_from_quantized  # noqa: E402


class Tables(nn.Module):
    """A convolution, then one element-wise function after another (each a 256-entry TABLE)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(self.conv(x)) + nn.functional.hardswish(self.conv(x))
        return torch.tanh(nn.functional.gelu(y))


class Fire(nn.Module):
    """SqueezeNet's fire module after a ceil-mode max pool: two expands concatenated over channels."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.squeeze = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 1)
        self.e1, self.e3 = nn.Conv2d(4, 8, 1), nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.max_pool2d(torch.relu(self.stem(x)), 3, 2, ceil_mode=True)
        s = torch.relu(self.squeeze(y))
        return torch.cat([torch.relu(self.e1(s)), torch.relu(self.e3(s))], 1)


class Gate(nn.Module):
    """A squeeze-excitation gate: the mean over space, a sigmoid, a broadcast multiply."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return y * torch.sigmoid(self.fc(y.mean((2, 3), keepdim=True)))


class Classes(nn.Module):
    """A 1-D convolution's channels as classes: log_softmax over them (Wav2Letter's head), or softmax."""

    def __init__(self, log: bool, classes: int = 12) -> None:
        super().__init__()
        self.conv, self.log = nn.Conv1d(6, classes, 3, padding=1), log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return nn.functional.log_softmax(y, dim=1) if self.log else nn.functional.softmax(y, dim=1)


IDS = ["tables", "fire", "gate", "log_softmax", "softmax", "pad"]


class Padded(nn.Module):
    """A convolution, then a pad of its spatial dims with a non-zero value, then a valid convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(nn.functional.pad(torch.relu(self.conv1(x)), (1, 2, 0, 1), value=0.5))


CASES = [(Tables, (1, 3, 8, 8)), (Fire, (1, 3, 16, 16)), (Gate, (1, 3, 8, 8)), (lambda: Classes(True), (1, 6, 10)),
         (lambda: Classes(False), (1, 6, 10)), (Padded, (1, 3, 9, 9))]


@pytest.mark.parametrize(("model", "shape"), CASES, ids=IDS)
def test_each_operator_is_within_one_step_of_the_quantized_model(model, shape, request) -> None:
    """softmax alone is allowed two steps: its exponentials are int8 values, where the quantized torch
    model computes them in float (one step on these inputs; two seen on wider ones)."""
    assert steps_from_quantized(model(), shape) <= (2 if "softmax" in request.node.callspec.id[:7] else 1)


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize(("model", "shape"), CASES, ids=IDS)
def test_vela_compiles_each_operator(model, shape, target) -> None:
    torch.manual_seed(3)
    found = lowered(model(), (torch.randn(shape),), "ethos-u", target=target)
    assert len(found.processed) == 1 and only_edges_outside(found)


def test_a_softmax_over_more_than_256_values_stays_on_the_cpu_with_its_reason() -> None:
    torch.manual_seed(3)
    found = lowered(Classes(True, classes=300), (torch.randn(1, 6, 4),), "tosa")
    reasons = {o.node: o.reason for o in found.report.outside}
    assert reasons["_log_softmax"] == "a softmax over more than 256 values (its sum's table covers at most 256)"


def test_tables_are_quantized_only_in_the_npu_mode() -> None:
    from etbuild.quantize import flow
    from etbuild.quantize.modules import SchemeMap
    from etbuild.quantize.schemes import MODES

    x = (torch.randn(1, 3, 8, 8),)
    ep = torch.export.export(Tables().eval(), x, strict=False)
    for mode, quantized in (("default", False), ("npu-int8", True)):
        converted = flow.quantize(ep, flow.Plan(SchemeMap("int8-static"), True, mode=MODES[mode]), [x])
        tanh = next(n for n in converted.graph.nodes if "tanh" in str(n.target))
        quantize = torch.ops.quantized_decomposed.quantize_per_tensor.default
        assert (next(iter(tanh.users)).target is quantize) == quantized
