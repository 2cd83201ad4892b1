"""The XNNPACK backend with a dynamic leading dimension (DYNAMIC_BOUND tensors planned at the Dim's max):
the partitioner never pins the export's symbol to its example size, and the delegates it makes run
at any size up to the bound, in our runtime and in ExecuTorch's. Slices and concatenations take the
dynamic size on the dims they do not slice or join (rotate-half RoPE), never on the one they do."""

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


class RotaryHalf(torch.nn.Module):
    """transformers' apply_rotary_pos_emb: q `[1, H, n, D]`, cos and sin `[1, n, D]` unsqueezed over the
    heads, rotate_half's two slices of the last dim and their concatenation, with the token count n dynamic."""

    def forward(self, q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = q.shape[-1] // 2
        rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
        return q * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


def _rotary_inputs(n: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(1, 4, n, 8), torch.randn(1, n, 8), torch.randn(1, n, 8)


def _export(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], dims: tuple[dict[int, object], ...]):
    return torch.export.export(module.eval(), inputs, dynamic_shapes=dims)


def _dynamic_program(module: torch.nn.Module) -> bytes:
    n = torch.export.Dim("n", min=1, max=MAX)
    return compile_exported({"forward": _export(module, (torch.randn(1, 2, 8),), ({1: n},))}, backends=XNNPACK).pte


def _assert_runs_like_eager(module: torch.nn.Module, pte: bytes, inputs_of, sizes: tuple[int, ...],
                            rtol: float, atol: float) -> None:
    """The program's forward at each token count n (inputs `inputs_of(n)`) equals eager torch's, in our
    runtime and (when installed) ExecuTorch's."""
    method = Program(pte).load_method("forward")
    for n in sizes:
        inputs = inputs_of(n)
        with torch.no_grad():
            expected = module(*inputs).numpy()
        np.testing.assert_allclose(method(*[t.numpy() for t in inputs])[0], expected, rtol=rtol, atol=atol)
        if HAS_EXECUTORCH:
            from tests.backends.xnnpack.oracle import run_executorch

            np.testing.assert_allclose(run_executorch(pte, list(inputs))[0], expected, rtol=rtol, atol=atol)


def test_the_input_is_planned_at_the_dims_max_not_the_example_size():
    pte = _dynamic_program(NormLinear())
    (plan,) = [p for p in read_program(pte)[0].execution_plan if p.name == "forward"]
    tensor = plan.values[plan.inputs[0]].val
    assert list(tensor.sizes) == [1, MAX, 8] and tensor.shape_dynamism == 1


def test_it_runs_at_any_size_up_to_the_bound_in_both_runtimes():
    torch.manual_seed(0)
    module = NormLinear()
    _assert_runs_like_eager(module, _dynamic_program(module), lambda n: (torch.randn(1, n, 8),), (1, 7, MAX),
                            rtol=1e-4, atol=1e-5)


class WideNorm(torch.nn.Module):
    """RMSNorm over 512 elements (its mean summed in two products) on `[1, n, 512]`."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(512) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def test_a_wide_norm_sums_its_rows_in_chunks_at_any_size():
    """The chunked sums reshape with the token count inferred (0), so they run at any size up to the bound."""
    torch.manual_seed(0)
    module = WideNorm()
    n = torch.export.Dim("n", min=1, max=MAX)
    compiled = compile_exported({"forward": _export(module, (torch.randn(1, 2, 512),), ({1: n},))},
                                backends=XNNPACK)
    (partition,) = compiled.report.methods[0].partitions
    assert (partition.backend_nodes["FullyConnected"], partition.backend_nodes["StaticReshape"]) == (2, 2)
    _assert_runs_like_eager(module, compiled.pte, lambda n: (torch.randn(1, n, 512),), (1, 5, MAX),
                            rtol=1e-4, atol=1e-5)


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


def _rotary_program() -> tuple[bytes, dict]:
    n = torch.export.Dim("n", min=1, max=MAX)
    exported = _export(RotaryHalf(), _rotary_inputs(3), ({2: n}, {1: n}, {1: n}))
    compiled = compile_exported({"forward": exported}, backends=XNNPACK)
    return compiled.pte, compiled.report.to_json()["methods"]["forward"]


def test_rotate_half_slices_and_concatenation_take_a_dynamic_size_off_their_axis():
    pte, report = _rotary_program()
    assert report["outside"] == [] and report["delegates"] == 1, report
    _assert_runs_like_eager(RotaryHalf(), pte, _rotary_inputs, (1, 5, MAX, 2), rtol=1e-6, atol=1e-6)


class FusedGateUp(torch.nn.Module):
    """Phi-3's MLP (one projection split in two along the features, `chunk`) with activations XNNPACK has
    nodes for (GELU, ReLU, clamp), over tokens `[1, n, 8]`."""

    def __init__(self) -> None:
        super().__init__()
        self.gate_up, self.down = torch.nn.Linear(8, 24), torch.nn.Linear(12, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(torch.nn.functional.gelu(gate) * torch.relu(up)).clamp(-0.5, 0.5)


def test_a_split_off_the_dynamic_dim_and_activations_are_delegated_and_run_at_any_size():
    torch.manual_seed(0)
    module = FusedGateUp()
    exported = _export(module, (torch.randn(1, 3, 8),), ({1: torch.export.Dim("n", min=1, max=MAX)},))
    compiled = compile_exported({"forward": exported}, backends=XNNPACK)
    report = compiled.report.to_json()["methods"]["forward"]
    assert [o["operator"] for o in report["outside"]] == ["aten::sym_size.int"], report  # the linear's view
    assert report["delegates"] == 1, report
    _assert_runs_like_eager(module, compiled.pte, lambda n: (torch.randn(1, n, 8),), (1, 6, MAX),
                            rtol=1e-5, atol=1e-5)


class AlongTokens(torch.nn.Module):
    """A slice and a concatenation along the dynamic token dim: XNNPACK cannot size them per call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        return torch.cat((y[:, 1:], y), dim=1) + 1


def test_a_slice_or_concatenation_along_the_dynamic_dim_stays_outside_with_the_reason():
    exported = _export(AlongTokens(), (torch.randn(1, 3, 8),), ({1: torch.export.Dim("n", min=3, max=MAX)},))
    compiled = compile_exported({"forward": exported}, backends=XNNPACK)
    outside = {o["operator"]: o["reason"] for o in compiled.report.to_json()["methods"]["forward"]["outside"]}
    assert set(outside) >= {"aten::slice.Tensor", "aten::cat"}, outside
    assert "its dim 1 (s" in outside["aten::slice.Tensor"] and "is dynamic" in outside["aten::slice.Tensor"]
    assert "its dim 1 (" in outside["aten::cat"] and "is dynamic" in outside["aten::cat"]
    method = Program(compiled.pte).load_method("forward")
    for n in (3, 9):
        x = torch.randn(1, n, 8)
        np.testing.assert_allclose(method(x.numpy())[0], AlongTokens()(x).numpy(), rtol=1e-6, atol=1e-6)


def test_a_static_slice_of_a_resized_input_as_xnnpack_reshapes_it():
    """Size 0 at offset 0 is the input's whole dim at run time; a size past the input (the bound, as
    another writer may put it) is clamped to it; both give x[..., 2:5] at every token count."""
    from etbuild.backends.xnnpack.format import graph as g
    from etbuild.runtime.format import program as fb
    from tests.backends.xnnpack.graphs import GraphBuilder, float_tensor

    for written in (0, MAX):
        gb = GraphBuilder()
        x = gb.tensor((1, MAX, 6), flags=g.FLAG_EXTERNAL_INPUT)
        out = gb.tensor((1, MAX, 3), flags=g.FLAG_EXTERNAL_OUTPUT)
        gb.node("StaticSlice", num_dims=3, offsets=[0, 0, 2], sizes=[1, written, 3], input_id=x, output_id=out,
                flags=0)
        tensors = [float_tensor(1, MAX, 6), float_tensor(1, MAX, 3)]
        for t in tensors:
            t.shape_dynamism = fb.TensorShapeDynamism.DYNAMIC_BOUND
        method = Program(gb.pte(tensors)).load_method()
        for n in (MAX, 3, 1):
            data = np.random.default_rng(n).standard_normal((1, n, 6)).astype(np.float32)
            np.testing.assert_array_equal(method(data)[0], data[..., 2:5])
