"""The XNNPACK backend with a dynamic leading dimension (DYNAMIC_BOUND tensors planned at the Dim's max):
the partitioner never pins the export's symbol to its example size, and the delegates it makes run
at any size up to the bound, in our runtime and in ExecuTorch's."""

from __future__ import annotations

import numpy as np
import torch

from etbuild.pipeline import compile_exported
from etbuild.recipe import BackendConfig
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program
from tests.conftest import HAS_EXECUTORCH

XNNPACK = (BackendConfig("xnnpack", {}),)
MAX = 16


class NormLinear(torch.nn.Module):
    """RMSNorm (pow, mean, rsqrt, mul) then a linear, over tokens `[1, n, 8]`."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(8) + 0.5)
        self.proj = torch.nn.Linear(8, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return self.proj(x).view(1, x.shape[1], 3, 4).transpose(1, 2)


def _dynamic_program(module: torch.nn.Module) -> bytes:
    n = torch.export.Dim("n", min=1, max=MAX)
    exported = torch.export.export(module.eval(), (torch.randn(1, 2, 8),), dynamic_shapes=({1: n},))
    return compile_exported({"forward": exported}, backends=XNNPACK).pte


def test_the_input_is_planned_at_the_dims_max_not_the_example_size():
    pte = _dynamic_program(NormLinear())
    (plan,) = [p for p in read_program(pte)[0].execution_plan if p.name == "forward"]
    tensor = plan.values[plan.inputs[0]].val
    assert list(tensor.sizes) == [1, MAX, 8] and tensor.shape_dynamism == 1


def test_it_runs_at_any_size_up_to_the_bound_in_both_runtimes():
    torch.manual_seed(0)
    module = NormLinear()
    pte = _dynamic_program(module)
    method = Program(pte).load_method("forward")
    for n in (1, 7, MAX):
        x = torch.randn(1, n, 8)
        with torch.no_grad():
            expected = module(x).numpy()
        np.testing.assert_allclose(method(x.numpy())[0], expected, rtol=1e-4, atol=1e-5)
        if HAS_EXECUTORCH:
            from tests.backends.xnnpack.oracle import run_executorch

            np.testing.assert_allclose(run_executorch(pte, [x])[0], expected, rtol=1e-4, atol=1e-5)


def test_the_norm_and_linear_are_delegated_with_the_dynamic_size():
    compiled = compile_exported({"forward": torch.export.export(
        NormLinear().eval(), (torch.randn(1, 2, 8),),
        dynamic_shapes=({1: torch.export.Dim("n", min=1, max=MAX)},))}, backends=XNNPACK)
    outside = compiled.report.to_json()["methods"]["forward"]["outside"]
    assert [o["operator"] for o in outside] == ["aten::sym_size.int"], outside  # the view's size, unused inside


def test_a_reshape_writes_zero_for_the_dynamic_size_and_refuses_two():
    import math

    import pytest

    from etbuild.backends.xnnpack.aot.builder import DynamicSize, GraphBuilder, is_dynamic
    from etbuild.errors import InternalError

    n = DynamicSize(MAX)
    assert is_dynamic(math.prod((1, n, 4))) and is_dynamic(n * 4 // 2) and not is_dynamic(MAX)
    b = GraphBuilder()
    x = b.tensor((1, n, 4, 16))
    y = b.reshape(x, (n * 4, 16))
    assert b.graph.xnodes[-1].node.new_shape == [0, 16] and b.dims(y) == (MAX * 4, 16) and is_dynamic(b.dims(y)[0])
    with pytest.raises(InternalError, match="one dynamic dim"):
        b.reshape(x, (n, n))
    with pytest.raises(InternalError, match="one dynamic dim"):
        b.reshape(x, (MAX * 4, 16))  # the dynamic size lost: a static reshape would be wrong below the bound
