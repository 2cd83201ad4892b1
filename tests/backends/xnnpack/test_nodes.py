"""Each XNNPACK node kind ExecuTorch's partitioner emits, lowered by ExecuTorch and run in our runtime.

Every case is a tiny torch module with random (odd-shaped, broadcasting) inputs: ExecuTorch
lowers it with XnnpackPartitioner (after XNNPACKQuantizer for the int8 cases); the test
checks the delegate holds the node kind it is about, then compares our runtime's outputs with
ExecuTorch's runtime on the same file and with the torch module (for int8: the converted
pt2e module), within float rounding or one quantization step. A few cases run in the fast
suite; the rest are marked slow. Skipped without the executorch oracle.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.backends.xnnpack.oracle import lower, quant_step, run_executorch, run_ours, run_torch
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]


class Fn(nn.Module):
    """A module computing f(modules, *inputs)."""

    def __init__(self, f: Callable, *modules: nn.Module) -> None:
        super().__init__()
        self.f, self.parts = f, nn.ModuleList(modules)

    def forward(self, *xs: torch.Tensor):  # noqa: ANN201
        return self.f(self.parts, *xs)


def fn(f: Callable) -> Fn:
    return Fn(lambda _, *xs: f(*xs))


def r(*shape: int, scale: float = 1.0, positive: bool = False) -> torch.Tensor:
    x = torch.randn(*shape) * scale
    return x.abs() + 0.1 if positive else x


# (id, module, inputs, the node kind the delegate must hold, quantization)
FLOAT_CASES = [
    ("abs", lambda: fn(torch.abs), lambda: (r(2, 3, 5),), "Abs"),
    ("neg", lambda: fn(torch.neg), lambda: (r(2, 3, 5),), "Negate"),
    ("floor", lambda: fn(lambda x: torch.floor(x * 3)), lambda: (r(2, 3, 5),), "Floor"),
    ("ceil", lambda: fn(lambda x: torch.ceil(x * 3)), lambda: (r(2, 3, 5),), "Ceiling"),
    ("square", lambda: fn(lambda x: x**2), lambda: (r(2, 3, 5),), "Square"),
    ("sqrt", lambda: fn(torch.sqrt), lambda: (r(2, 3, 5, positive=True),), "SquareRoot"),
    ("rsqrt", lambda: fn(torch.rsqrt), lambda: (r(2, 3, 5, positive=True),), "ReciprocalSquareRoot"),
    ("exp", lambda: fn(torch.exp), lambda: (r(2, 3, 5),), "Exp"),
    ("log", lambda: fn(torch.log), lambda: (r(2, 3, 5, positive=True),), "Log"),
    ("sin", lambda: fn(torch.sin), lambda: (r(2, 3, 5, scale=3),), "Sin"),
    ("cos", lambda: fn(torch.cos), lambda: (r(2, 3, 5, scale=3),), "Cos"),
    ("sigmoid", lambda: fn(torch.sigmoid), lambda: (r(2, 3, 5, scale=8),), "Sigmoid"),
    ("tanh", lambda: fn(torch.tanh), lambda: (r(2, 3, 5, scale=3),), "Tanh"),
    ("gelu", lambda: nn.GELU(), lambda: (r(2, 3, 5, scale=3),), "Gelu"),
    ("hardswish", lambda: nn.Hardswish(), lambda: (r(2, 3, 5, scale=4),), "Hardswish"),
    ("leaky_relu", lambda: nn.LeakyReLU(0.2), lambda: (r(2, 3, 5),), "LeakyReLU"),
    ("relu", lambda: nn.ReLU(), lambda: (r(2, 3, 5),), "Clamp"),
    ("hardtanh", lambda: nn.Hardtanh(-0.5, 0.7), lambda: (r(2, 3, 5),), "Clamp"),
    ("clamp", lambda: fn(lambda x: torch.clamp(x, -0.3, 0.4)), lambda: (r(3, 7),), "Clamp"),
    ("softmax", lambda: nn.Softmax(-1), lambda: (r(2, 3, 7, scale=4),), "Softmax"),
    ("add_broadcast", lambda: fn(torch.add), lambda: (r(2, 3, 5), r(3, 1)), "Add"),
    ("sub_broadcast", lambda: fn(torch.sub), lambda: (r(2, 1, 5), r(3, 1)), "Subtract"),
    ("mul_broadcast", lambda: fn(torch.mul), lambda: (r(2, 3, 5), r(5)), "Multiply"),
    ("div_broadcast", lambda: fn(torch.div), lambda: (r(2, 3, 5), r(5, positive=True)), "Div"),
    ("minimum", lambda: fn(torch.minimum), lambda: (r(2, 3, 5), r(3, 5)), "Minimum"),
    ("maximum", lambda: fn(torch.maximum), lambda: (r(2, 3, 5), r(1, 5)), "Maximum"),
    ("add_relu", lambda: fn(lambda a, b: torch.relu(a + b)), lambda: (r(4, 6), r(4, 6)), "Add"),
    ("prelu", lambda: nn.PReLU(4), lambda: (r(2, 4, 5, 3),), "PReLU"),
    ("linear", lambda: nn.Linear(7, 5), lambda: (r(3, 7),), "FullyConnected"),
    ("linear_3d_no_bias", lambda: nn.Linear(7, 5, bias=False), lambda: (r(2, 3, 7),), "FullyConnected"),
    ("linear_relu", lambda: nn.Sequential(nn.Linear(9, 6), nn.ReLU()), lambda: (r(1, 9),), "FullyConnected"),
    ("bmm", lambda: fn(torch.bmm), lambda: (r(2, 3, 7), r(2, 7, 5)), "BatchMatrixMultiply"),
    ("matmul_4d", lambda: fn(torch.matmul), lambda: (r(2, 2, 3, 7), r(2, 2, 7, 5)), "BatchMatrixMultiply"),
    ("conv", lambda: nn.Conv2d(3, 6, 3, stride=2, padding=1), lambda: (r(2, 3, 9, 8),), "Conv2d"),
    ("conv_pointwise", lambda: nn.Conv2d(5, 7, 1), lambda: (r(1, 5, 6, 4),), "Conv2d"),
    ("conv_grouped_dilated", lambda: nn.Conv2d(4, 6, (3, 2), stride=(1, 2), padding=(2, 1), dilation=2, groups=2),
     lambda: (r(1, 4, 11, 9),), "Conv2d"),
    ("conv_relu6", lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU6()), lambda: (r(1, 3, 7, 7, scale=3),), "Conv2d"),
    ("depthwise", lambda: nn.Conv2d(4, 4, 3, padding=1, stride=2, groups=4), lambda: (r(1, 4, 7, 8),),
     "DepthwiseConv2d"),
    ("depthwise_multiplier", lambda: nn.Conv2d(3, 6, 3, padding=1, groups=3), lambda: (r(2, 3, 5, 6),),
     "DepthwiseConv2d"),
    ("conv1d", lambda: nn.Conv1d(3, 5, 3, padding=1), lambda: (r(2, 3, 11),), "Conv2d"),
    ("conv_transpose", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
     lambda: (r(1, 4, 5, 6),), "ConvTranspose2d"),
    ("conv_transpose_grouped", lambda: nn.ConvTranspose2d(4, 6, 2, stride=2, groups=2), lambda: (r(1, 4, 5, 3),),
     "ConvTranspose2d"),
    ("max_pool", lambda: nn.MaxPool2d(3, stride=2, padding=1), lambda: (r(1, 4, 9, 9),), "MaxPooling2d"),
    ("max_pool_ceil", lambda: nn.MaxPool2d(2, stride=2, ceil_mode=True), lambda: (r(1, 4, 9, 7),), "MaxPooling2d"),
    ("max_pool_dilated", lambda: nn.MaxPool2d(2, stride=1, dilation=2), lambda: (r(1, 2, 7, 6),), "MaxPooling2d"),
    ("avg_pool_padded", lambda: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
     lambda: (r(1, 4, 9, 9),), "AvgPooling2d"),
    ("avg_pool", lambda: nn.AvgPool2d(2), lambda: (r(2, 3, 8, 6),), "AvgPooling2d"),
    ("mean_hw", lambda: fn(lambda x: x.mean((2, 3), keepdim=True)), lambda: (r(2, 4, 5, 3),), "GlobalAvgPooling2d"),
    ("permute", lambda: fn(lambda x: (x * 2).permute(2, 0, 1)), lambda: (r(2, 3, 5),), "StaticTranspose"),
    ("view", lambda: fn(lambda x: (x * 2).view(6, 5)), lambda: (r(2, 3, 5),), "StaticReshape"),
    ("slice", lambda: fn(lambda x: (x * 2)[:, 1:3]), lambda: (r(2, 4, 5),), "StaticSlice"),
    ("cat2", lambda: fn(lambda a, b: torch.cat([a, b], 1)), lambda: (r(2, 3, 5), r(2, 2, 5)), "Concatenate2"),
    ("cat3", lambda: fn(lambda a, b, c: torch.cat([a, b, c], 0)), lambda: (r(1, 3), r(2, 3), r(1, 3)), "Concatenate3"),
    ("cat4", lambda: fn(lambda *xs: torch.cat(xs, -1)), lambda: tuple(r(2, k) for k in (1, 3, 2, 1)), "Concatenate4"),
    ("cat5", lambda: fn(lambda *xs: torch.cat(xs, 2)), lambda: tuple(r(2, 3, k) for k in (1, 2, 3, 1, 2)),
     "Concatenate5"),
    ("pad", lambda: fn(lambda x: F.pad(x, (1, 2, 0, 1), value=0.5)), lambda: (r(1, 2, 4, 5),), "StaticConstantPad"),
    ("upsample_bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), lambda: (r(1, 2, 4, 5),),
     "StaticResizeBilinear2D"),
    ("upsample_align_corners", lambda: nn.Upsample(size=(7, 9), mode="bilinear", align_corners=True),
     lambda: (r(1, 2, 4, 5),), "StaticResizeBilinear2D"),
    ("clone", lambda: fn(lambda x: (x, x.clone())), lambda: (r(2, 3),), "Copy"),
    ("channels_last", lambda: fn(lambda x: (x * 2).to(memory_format=torch.channels_last)), lambda: (r(1, 3, 4, 5),),
     "StaticTranspose"),
]


def _two(m: nn.ModuleList, x: torch.Tensor, op: Callable) -> torch.Tensor:
    return op(m[0](x), m[1](x))


QUANT_CASES = [
    ("conv_relu", lambda: Fn(lambda m, x: torch.relu(m[0](x)), nn.Conv2d(3, 8, 3, padding=1)),
     lambda: (r(1, 3, 8, 8),), "Conv2d", "static"),
    ("depthwise", lambda: Fn(lambda m, x: m[1](torch.relu(m[0](x))), nn.Conv2d(3, 8, 1),
                             nn.Conv2d(8, 8, 3, groups=8, stride=2)), lambda: (r(1, 3, 8, 8),), "DepthwiseConv2d",
     "static"),
    ("linear", lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 5)), lambda: (r(4, 16),),
     "FullyConnected", "static"),
    ("add", lambda: Fn(lambda m, x: _two(m, x, torch.add), nn.Conv2d(3, 4, 1), nn.Conv2d(3, 4, 1)),
     lambda: (r(1, 3, 5, 5),), "Add", "static"),
    ("mul", lambda: Fn(lambda m, x: _two(m, x, torch.mul), nn.Linear(6, 4), nn.Linear(6, 4)), lambda: (r(2, 6),),
     "Multiply", "static"),
    ("max_pool", lambda: Fn(lambda m, x: F.max_pool2d(m[0](x), 2), nn.Conv2d(3, 4, 3)), lambda: (r(1, 3, 9, 9),),
     "MaxPooling2d", "static"),
    ("avg_pool", lambda: Fn(lambda m, x: F.avg_pool2d(m[0](x), 2), nn.Conv2d(3, 4, 3)), lambda: (r(1, 3, 9, 9),),
     "AvgPooling2d", "static"),
    ("mean", lambda: Fn(lambda m, x: m[0](x).mean((2, 3), keepdim=True), nn.Conv2d(3, 4, 3)),
     lambda: (r(1, 3, 9, 9),), "GlobalAvgPooling2d", "static"),
    ("cat", lambda: Fn(lambda m, x: torch.cat([m[0](x), m[1](x)], 1), nn.Conv2d(3, 4, 1), nn.Conv2d(3, 2, 1)),
     lambda: (r(1, 3, 5, 5),), "Concatenate2", "static"),
    ("hardtanh", lambda: Fn(lambda m, x: F.hardtanh(m[0](x)), nn.Linear(6, 4)), lambda: (r(2, 6, scale=3),),
     "Clamp", "static"),
    ("conv_transpose", lambda: nn.ConvTranspose2d(3, 4, 3, stride=2), lambda: (r(1, 3, 5, 5),), "ConvTranspose2d",
     "static"),
    ("dynamic_linear", lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 5)), lambda: (r(4, 16),),
     "FullyConnected", "dynamic"),
    ("dynamic_linear_3d", lambda: nn.Linear(16, 32), lambda: (r(2, 3, 16),), "FullyConnected", "dynamic"),
    ("dynamic_conv", lambda: nn.Conv2d(3, 8, 3), lambda: (r(1, 3, 8, 8),), "Conv2d", "dynamic"),
]

FAST = {"conv", "depthwise", "linear_relu", "add_broadcast", "softmax", "static-linear", "dynamic-dynamic_linear"}


def _params(cases: list, prefix: Callable[[tuple], str] = lambda c: "") -> list:
    ids = [prefix(c) + c[0] for c in cases]
    return [pytest.param(*c[1:], id=i, marks=() if i in FAST else pytest.mark.slow) for c, i in zip(cases, ids)]


def _assert_close(actual: list[np.ndarray], expected: list[np.ndarray], atol: float, what: str) -> None:
    assert len(actual) == len(expected), what
    for a, e in zip(actual, expected):
        assert a.shape == e.shape, f"{what}: shape {a.shape} vs {e.shape}"
        np.testing.assert_allclose(a.astype(np.float64), e, rtol=1e-5, atol=atol, err_msg=what)


@pytest.mark.parametrize(("module", "inputs", "node"), _params(FLOAT_CASES))
def test_float_node(module, inputs, node):
    torch.manual_seed(0)
    mod, xs = module(), inputs()
    lowered = lower(mod, xs)
    assert lowered.nodes[node] >= 1, f"ExecuTorch did not emit {node}: {dict(lowered.nodes)}"
    ours = run_ours(lowered.pte, list(xs))
    _assert_close(ours, run_executorch(lowered.pte, list(xs)), 1e-5, "ours vs ExecuTorch")
    _assert_close(ours, run_torch(mod, list(xs)), 1e-5, "ours vs torch")


@pytest.mark.slow
def test_dynamic_batch_through_convolutions_and_pooling():
    """Inputs below the exported bound: every shape re-inferred, the outputs resized, per call."""
    torch.manual_seed(0)
    model = Fn(lambda m, x: m[2](m[1](torch.relu(m[0](x)))).mean((2, 3), keepdim=True) + 1,
               nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, groups=8, stride=2), nn.MaxPool2d(2))
    batch = torch.export.Dim("batch", min=1, max=6)
    lowered = lower(model, (r(4, 3, 9, 9),), dynamic_shapes=(({0: batch},),))  # forward(*xs)
    assert {"Conv2d", "DepthwiseConv2d", "MaxPooling2d", "GlobalAvgPooling2d"} <= set(lowered.nodes)
    from etbuild.runtime import Program

    method = Program(lowered.pte).load_method()
    for n in (6, 1, 3, 6, 2):
        x = r(n, 3, 9, 9)
        ours = method(x.numpy())
        assert ours[0].shape == (n, 8, 1, 1)
        _assert_close(ours, run_executorch(lowered.pte, [x]), 1e-5, f"batch {n} vs ExecuTorch")
        _assert_close(ours, run_torch(model, [x]), 1e-5, f"batch {n} vs torch")


@pytest.mark.parametrize(("module", "inputs", "node", "scheme"), _params(QUANT_CASES, lambda c: f"{c[4]}-"))
def test_quantized_node(module, inputs, node, scheme):
    torch.manual_seed(0)
    mod, xs = module(), inputs()
    lowered = lower(mod, xs, quant=scheme)
    assert lowered.nodes[node] >= 1, f"ExecuTorch did not emit {node}: {dict(lowered.nodes)}"
    assert lowered.nodes["Convert"] >= 1 and not lowered.operators, dict(lowered.nodes)
    ours = run_ours(lowered.pte, list(xs))
    theirs = run_executorch(lowered.pte, list(xs))
    step = quant_step(lowered)
    reference = run_torch(lowered.reference, list(xs))
    if scheme == "static":  # int8 outputs: XNNPACK's integer arithmetic, within one quantization step
        _assert_close(ours, theirs, step * 1.001, "ours vs ExecuTorch")
        _assert_close(ours, reference, step * 1.001, "ours vs the converted torch model")
    else:  # float outputs of per-row quantized inputs
        scale = max(float(np.abs(t).max()) for t in theirs)
        _assert_close(ours, theirs, 1e-5 * scale, "ours vs ExecuTorch")
