"""The XNNPACK backend's AOT half: what the partition step delegates, what it leaves out and why,
and the programs it makes, run in our runtime against eager torch."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from etbuild.backends.xnnpack.aot.ops.base import SMALL
from etbuild.backends.xnnpack.format import graph as g
from etbuild.build.driver import build
from etbuild.lowering.partition_svg import partition_svg
from etbuild.pipeline import compile_exported
from etbuild.recipe import BackendConfig
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program
from etbuild.runtime.inspect import describe, format_description
from tests.conftest import HAS_EXECUTORCH

XNNPACK = (BackendConfig("xnnpack", {}),)


class Block(torch.nn.Module):
    """A pre-norm transformer block: layer norms, multi-head attention, an MLP with GELU."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.out((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class WithCumsum(torch.nn.Module):
    """Linear, a cumulative sum (no XNNPACK node), then a head."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cumsum(self.body(x).relu(), dim=1))


def _compile(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], backends=XNNPACK):
    exported = torch.export.export(module.eval(), inputs)
    return compile_exported({"forward": exported}, backends=backends)


def _check_against_eager(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], pte: bytes, atol: float):
    with torch.no_grad():
        expected = module(*inputs).numpy()
    (actual,) = Program(pte).load_method("forward")(*[t.numpy() for t in inputs])
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=atol)


def _check_in_both_runtimes(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], pte: bytes) -> None:
    """`pte` gives eager's outputs in our runtime and, when executorch is installed, in ExecuTorch's."""
    _check_against_eager(module, inputs, pte, atol=1e-5)
    if HAS_EXECUTORCH:
        from tests.backends.xnnpack.oracle import run_executorch

        with torch.no_grad():
            expected = module(*inputs).numpy()
        np.testing.assert_allclose(run_executorch(pte, list(inputs))[0], expected, rtol=1e-4, atol=1e-5)


def test_a_transformer_block_is_one_delegate_with_nothing_outside():
    torch.manual_seed(0)
    module, inputs = Block(), (torch.randn(2, 64, 32),)  # LayerNorms over 4096 elements: decomposed inside
    compiled = _compile(module, inputs)
    method = compiled.report.methods[0]
    assert (len(method.partitions), method.outside, method.delegated_nodes) == (1, (), method.compute_nodes)
    program, _ = read_program(compiled.pte)
    plan = program.execution_plan[0]
    assert [d.id for d in plan.delegates] == ["XnnpackBackend"] and not plan.operators
    kinds = method.partitions[0].backend_nodes
    assert {"ReciprocalSquareRoot", "Softmax", "BatchMatrixMultiply", "FullyConnected"} <= set(kinds)
    _check_against_eager(module, inputs, compiled.pte, atol=1e-5)


def test_a_layer_norm_over_few_elements_stays_outside_for_the_portable_kernel():
    torch.manual_seed(0)
    module, inputs = Block(), (torch.randn(2, 5, 32),)
    compiled = _compile(module, inputs)
    method = compiled.report.methods[0]
    assert [o.operator for o in method.outside] == ["aten::native_layer_norm"] * 2
    assert method.outside[0].reason.startswith(f"a layer_norm of fewer than {SMALL} elements")
    assert len(method.partitions) == 2
    _check_in_both_runtimes(module, inputs, compiled.pte)


class FusedHeads(torch.nn.Module):
    """A fused q/k/v projection read back with three selects, as bloom's attention does."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, d)
        return self.out(qkv[:, :, 0] * qkv[:, :, 1] + qkv[:, :, 2])


@pytest.mark.parametrize("tokens", [4, 256])
def test_a_select_of_few_elements_stays_outside_and_a_large_one_inside(tokens):
    torch.manual_seed(0)
    module, inputs = FusedHeads(), (torch.randn(1, tokens, 16),)
    compiled = _compile(module, inputs)
    method = compiled.report.methods[0]
    outside = [(o.operator, o.reason) for o in method.outside]
    if tokens * 16 < SMALL:
        assert outside == [("aten::select.int", f"a select of fewer than {SMALL} elements: one pass in the "
                            "portable kernel, a node split over the thread pool in XNNPACK")] * 3
    else:
        assert outside == [] and len(method.partitions) == 1
    _check_in_both_runtimes(module, inputs, compiled.pte)


class ConstantBeside(torch.nn.Module):
    """A cumulative sum (no XNNPACK node) beside a constant filled at run time: nothing XNNPACK would compute."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cumsum(x, dim=1), torch.full((4, 8), 2.0)


def test_a_partition_that_only_fills_a_constant_is_not_a_delegate():
    compiled = _compile(ConstantBeside(), (torch.randn(3, 8),))
    method = compiled.report.methods[0]
    reasons = {o.operator: o.reason for o in method.outside}
    assert reasons["aten::full"] == ("its partition only relabels bytes (views, copies, fills): "
                                     "not worth a delegate call")
    assert not method.partitions


def test_without_decompose_layer_norm_stays_outside_and_splits_the_block():
    torch.manual_seed(0)
    module, inputs = Block(), (torch.randn(2, 64, 32),)
    compiled = _compile(module, inputs, (BackendConfig("xnnpack", {"decompose": False}),))
    method = compiled.report.methods[0]
    reasons = {o.operator: o.reason for o in method.outside}
    assert reasons["aten::native_layer_norm"] == "taken only decomposed (option decompose is false)"
    assert len(method.partitions) > 1
    _check_against_eager(module, inputs, compiled.pte, atol=1e-5)


def test_an_operator_without_a_node_is_left_outside_with_its_reason_and_runs_on_kernels():
    torch.manual_seed(0)
    module, inputs = WithCumsum(), (torch.randn(3, 8),)
    compiled = _compile(module, inputs)
    method = compiled.report.methods[0]
    assert [(o.operator, o.reason) for o in method.outside] == [("aten::cumsum", "XNNPACK has no node for it")]
    assert [p.operators for p in method.partitions] == [{"aten::addmm": 1, "aten::relu": 1}, {"aten::addmm": 1}]
    json = compiled.report.to_json()["methods"]["forward"]
    assert json["outside"][0]["reason"] == "aten::cumsum: XNNPACK has no node for it"
    assert json["delegates"] == 2 and json["delegated_share"] == pytest.approx(3 / 4)
    program, _ = read_program(compiled.pte)
    assert [op.name for op in program.execution_plan[0].operators] == ["aten::cumsum"]
    _check_against_eager(module, inputs, compiled.pte, atol=1e-5)


def test_options_exclude_and_min_nodes_keep_calls_outside_and_say_so():
    torch.manual_seed(0)
    module, inputs = WithCumsum(), (torch.randn(3, 8),)
    compiled = _compile(module, inputs, (BackendConfig("xnnpack", {"exclude": ("head*",), "min_nodes": 2}),))
    outside = {(o.operator, o.reason) for o in compiled.report.methods[0].outside}
    assert ("aten::addmm", "its module matches option exclude 'head*'") in outside
    assert [p.operators for p in compiled.report.methods[0].partitions] == [{"aten::addmm": 1, "aten::relu": 1}]
    compiled = _compile(module, inputs, (BackendConfig("xnnpack", {"min_nodes": 3}),))
    assert compiled.report.methods[0].partitions == ()
    assert ("aten::relu", "its partition has 2 call(s), fewer than option min_nodes (3)") in {
        (o.operator, o.reason) for o in compiled.report.methods[0].outside}
    _check_against_eager(module, inputs, compiled.pte, atol=1e-5)


def test_float64_stays_outside_with_its_dtype():
    module, inputs = torch.nn.Linear(4, 3).double(), (torch.randn(2, 4, dtype=torch.float64),)
    compiled = _compile(module, inputs)
    assert {o.reason for o in compiled.report.methods[0].outside} == {"float64 not supported"}
    assert compiled.report.methods[0].partitions == ()


def test_partition_svg_colours_each_partition_and_inspect_lists_the_delegates(tmp_path):
    torch.manual_seed(0)
    compiled = _compile(WithCumsum(), (torch.randn(3, 8),))
    svg = partition_svg(compiled.report.methods[0], "forward")
    assert svg.startswith("<svg") and "aten::cumsum" in svg
    pte = tmp_path / "m.pte"
    pte.write_bytes(compiled.pte)
    summary = describe(pte)
    delegates = summary["methods"][0]["delegates"]
    assert [d["backend"] for d in delegates] == ["XnnpackBackend"] * 2
    assert all(d["blob_bytes"] > 0 and d["location"] == "segment" for d in delegates)
    assert summary["named_data"] >= 3 and summary["named_data_bytes"] >= (8 * 16 + 16 * 4) * 4
    text = format_description(summary)
    assert f"delegate 1: XnnpackBackend, blob {delegates[1]['blob_bytes']:,} bytes (segment)" in text


def test_torch_multihead_attention_runs_right_with_what_xnnpack_lacks_outside():
    torch.manual_seed(0)
    attn = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()

    class SelfAttention(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return attn(x, x, x, need_weights=False)[0]

    module, inputs = SelfAttention(), (torch.randn(2, 5, 16),)
    compiled = _compile(module, inputs)
    assert compiled.report.methods[0].partitions
    assert all(o.reason for o in compiled.report.methods[0].outside)
    _check_against_eager(module, inputs, compiled.pte, atol=1e-5)


TINY = """\
name: tiny
model:
  factory: etbuild.zoo:mlp
  kwargs: {sizes: [12, 24, 6]}
  inputs: [{shape: [3, 12], dtype: float32}]
operators: {allow: ["aten::relu*"]}
verify: {samples: 2, rtol: 1.0e-4, atol: 1.0e-5}
"""


def test_the_allowlist_applies_outside_delegates_and_the_op_list_records_the_backends(tmp_path):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY + "backends: [{name: xnnpack}]\n")
    result = build([recipe], tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    select = json.loads((tmp_path / "build" / "tiny" / "select.json").read_text())
    assert (select["backends"], select["operators"]) == (["XnnpackBackend"], {})
    recipe.write_text(TINY)
    result = build([recipe], tmp_path / "build", stream=io.StringIO())
    assert "the program calls operators outside the allowlist:\n  aten::addmm.out (2 calls)" in result.failed[
        "select:tiny"]


@pytest.mark.parametrize("scheme", ["int8-dynamic-int4-weight", "int8-static"])
def test_quantized_linears_delegate_as_quantized_nodes_equal_to_the_converted_model(scheme):
    from etbuild.quantize.flow import Plan, quantize, reexport
    from etbuild.quantize.modules import SchemeMap

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()
    inputs = (torch.randn(4, 64),)
    samples = [(torch.randn(4, 64),) for _ in range(4)]
    converted = quantize(torch.export.export(module, inputs), Plan(SchemeMap(scheme)), samples)
    compiled = _compile_exported(reexport(converted, inputs, None))
    method = compiled.report.methods[0]
    assert (len(method.partitions), method.outside) == (1, ())
    kinds = method.partitions[0].backend_nodes
    assert kinds["FullyConnected"] == 2 and kinds["Convert"] >= 1
    blob_types = _filter_datatypes(compiled.pte)
    assert blob_types == ({"qbint4"} if scheme == "int8-dynamic-int4-weight" else {"qcint8"})
    with torch.no_grad():
        expected = converted(*samples[0]).numpy()
    (actual,) = Program(compiled.pte).load_method("forward")(*[t.numpy() for t in samples[0]])
    np.testing.assert_allclose(actual, expected, rtol=0, atol=0.05 * float(np.abs(expected).max()))


class MaskedResidual(torch.nn.Module):
    """A residual stream that crosses a masked step XNNPACK does not take (a where on a bool mask),
    as a BERT layer's attention mask splits its delegates."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        s = torch.where(x > 0.5, self.b(h), torch.zeros_like(h))
        return self.c(torch.relu(s)) + h


def test_an_int8_value_handed_from_one_delegate_to_the_next_stays_int8():
    from etbuild.backends.xnnpack.format import graph as g
    from etbuild.backends.xnnpack.format.blob import read_blob
    from etbuild.quantize.flow import Plan, quantize, reexport
    from etbuild.quantize.modules import SchemeMap
    from etbuild.runtime.format.pte import segment_bytes

    torch.manual_seed(0)
    module, inputs = MaskedResidual().eval(), (torch.randn(4, 16),)
    samples = [(torch.randn(4, 16),) for _ in range(4)]
    converted = quantize(torch.export.export(module, inputs), Plan(SchemeMap("int8-static")), samples)
    compiled = _compile_exported(reexport(converted, inputs, None))
    assert len(compiled.report.methods[0].partitions) == 2
    program, header = read_program(compiled.pte)
    segment = program.execution_plan[0].delegates[1].processed.index
    second = read_blob(segment_bytes(compiled.pte, program, header, segment))
    inputs_of_second = [second.graph.xvalues[i].value for i in second.graph.input_ids]
    assert any(isinstance(v, g.QuantizedTensorValue) and v.tensor_value.datatype == g.XNNDatatype.QINT8
               for v in inputs_of_second)  # the residual, int8 as the first delegate wrote it
    with torch.no_grad():
        expected = converted(*samples[0]).numpy()
    (actual,) = Program(compiled.pte).load_method("forward")(*[t.numpy() for t in samples[0]])
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-5)


def _compile_exported(exported):
    return compile_exported({"forward": exported}, backends=XNNPACK)


def _filter_datatypes(pte: bytes, kind: type | None = None) -> set[str]:
    """The datatypes of the filters of a program's delegates' nodes of `kind` (FullyConnected by default)."""
    names = {v: k.lower() for k, v in vars(g.XNNDatatype).items() if k.isupper()}
    found = set()
    for graph in _delegate_graphs(pte):
        for n in graph.xnodes:
            if isinstance(n.node, kind or g.FullyConnected):
                value = graph.xvalues[n.node.filter_id].value
                found.add(names[getattr(value, "tensor_value", value).datatype])
    return found


def test_verify_says_plainly_when_it_cannot_run_a_delegated_program_in_executorch(monkeypatch):
    from etbuild.verify import stage as verify

    monkeypatch.setattr(verify, "executorch_installed", lambda: False)
    assert verify._in_executorch(None, None, None) == {
        "skipped": "the executorch oracle is not installed (pip install -e '.[interop]')"}


def test_has_delegates(tmp_path):
    from etbuild.verify.stage import has_delegates

    torch.manual_seed(0)
    module, inputs = WithCumsum(), (torch.randn(3, 8),)
    for backends, expected in ((XNNPACK, True), ((), False)):
        pte = tmp_path / "m.pte"
        pte.write_bytes(_compile(module, inputs, backends).pte)
        assert has_delegates(pte) is expected


class PatchThenLinear(torch.nn.Module):
    """A patch convolution (its input quantized at run time, as int8-dynamic makes it) before a linear."""

    def __init__(self, groups: int = 1) -> None:
        super().__init__()
        self.patch = torch.nn.Conv2d(4, 8, 4, stride=4, groups=groups)
        self.fc = torch.nn.Linear(128, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.patch(x).flatten(1))


def _dynamic_patch_program(groups: int):
    from etbuild.quantize.flow import Plan, quantize, reexport
    from etbuild.quantize.modules import SchemeMap

    torch.manual_seed(0)
    module, inputs = PatchThenLinear(groups).eval(), (torch.randn(1, 4, 16, 16),)
    converted = quantize(torch.export.export(module, inputs), Plan(SchemeMap("int8-dynamic")), [inputs])
    compiled = _compile_exported(reexport(converted, inputs, None))
    with torch.no_grad():
        expected = converted(*inputs).numpy()
    (actual,) = Program(compiled.pte).load_method("forward")(*[t.numpy() for t in inputs])
    np.testing.assert_allclose(actual, expected, rtol=0, atol=0.05)
    return compiled.pte, inputs, actual


def test_a_dynamic_dequantize_stays_with_its_quantize_outside_the_partition():
    """A grouped convolution XNNPACK does not run on qdint8: its input's quantize stays outside,
    and so does the dequantize (taken alone, the partition input was int8 with run-time parameters)."""
    pte, _, _ = _dynamic_patch_program(groups=2)
    assert _filter_datatypes(pte, g.Convolution) == {"fp32"}


def test_a_convolution_on_an_input_quantized_at_run_time_keeps_int8_weights():
    pte, inputs, ours = _dynamic_patch_program(groups=1)
    assert _filter_datatypes(pte, g.Convolution) == {"qcint8"}  # was fp32: 4x the bytes
    if HAS_EXECUTORCH:
        import executorch.kernels.quantized  # noqa: F401  (in case quantize calls stay outside the delegate)
        from executorch.extension.pybindings import _C

        theirs = _C._load_for_executorch_from_buffer(pte).run_method("forward", inputs)[0].numpy()
        np.testing.assert_allclose(theirs, ours, rtol=0, atol=0.02)


class ChannelsLastMlp(torch.nn.Module):
    """A ConvNeXt block's pointwise MLP: Linear layers on a 4-D channels-last value (view → addmm → view)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.fc1, self.fc2 = torch.nn.LayerNorm(16), torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x.permute(0, 2, 3, 1)))))
        return x + y.permute(0, 3, 1, 2)


def test_a_static_int8_linear_on_a_4d_input_keeps_int8_weights():
    from etbuild.quantize.flow import Plan, quantize, reexport
    from etbuild.quantize.modules import SchemeMap

    torch.manual_seed(0)
    module, inputs = ChannelsLastMlp().eval(), (torch.randn(1, 16, 4, 4),)
    samples = [(torch.randn(1, 16, 4, 4),) for _ in range(4)]
    converted = quantize(torch.export.export(module, inputs), Plan(SchemeMap("int8-static")), samples)
    compiled = _compile_exported(reexport(converted, inputs, None))
    assert "qcint8" in _filter_datatypes(compiled.pte)  # the Linear layers: were fp32, 4x the bytes
    with torch.no_grad():
        expected = converted(*samples[0]).numpy()
    (actual,) = Program(compiled.pte).load_method("forward")(*[t.numpy() for t in samples[0]])
    step = float(np.ptp(expected)) / 255
    np.testing.assert_allclose(actual, expected, rtol=0, atol=2 * step)


class MaskedAttention(torch.nn.Module):
    """q, k and v projections of one input, the attention masked by a `where` XNNPACK has no node
    for: the v projection lands in the delegate after the mask, away from its input's dequantize."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), -1)
        return torch.where(mask.eq(0), torch.zeros_like(scores), scores) @ self.v(x)


def test_a_linear_reading_a_dynamic_dequantize_from_another_delegate_keeps_int8_weights():
    from etbuild.quantize.flow import Plan, quantize, reexport
    from etbuild.quantize.modules import SchemeMap

    torch.manual_seed(0)
    module, inputs = MaskedAttention().eval(), (torch.randn(1, 8, 32), torch.randint(0, 2, (1, 8, 8)))
    converted = quantize(torch.export.export(module, inputs), Plan(SchemeMap("int8-dynamic")), [inputs])
    compiled = _compile_exported(reexport(converted, inputs, None))
    assert len(read_program(compiled.pte)[0].execution_plan[0].delegates) == 2
    assert _filter_datatypes(compiled.pte) == {"qcint8"}  # the v projection's was fp32: 4x its bytes
    with torch.no_grad():
        expected = converted(*inputs).numpy()
    (actual,) = Program(compiled.pte).load_method("forward")(*[t.numpy() for t in inputs])
    np.testing.assert_allclose(actual, expected, rtol=0, atol=0.02)


class FireModule(torch.nn.Module):
    """SqueezeNet's fire module: a squeeze convolution, two expand branches concatenated."""

    def __init__(self) -> None:
        super().__init__()
        self.squeeze = torch.nn.Conv2d(8, 4, 1)
        self.expand1 = torch.nn.Conv2d(4, 8, 1)
        self.expand3 = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(16, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.relu(self.squeeze(x))
        return self.head(torch.cat([torch.relu(self.expand1(s)), torch.relu(self.expand3(s))], 1))


def test_a_concatenation_of_int8_branches_moves_int8_values_with_nothing_requantized():
    from etbuild.backends.xnnpack.format.blob import read_blob
    from etbuild.quantize.flow import Plan, quantize, reexport
    from etbuild.quantize.modules import SchemeMap
    from etbuild.runtime.format.pte import segment_bytes

    torch.manual_seed(0)
    module, samples = FireModule().eval(), [(torch.randn(1, 8, 6, 6),) for _ in range(4)]
    converted = quantize(torch.export.export(module, samples[0]), Plan(SchemeMap("int8-static")), samples)
    compiled = _compile_exported(reexport(converted, samples[0], None))
    program, header = read_program(compiled.pte)
    (delegate,) = program.execution_plan[0].delegates
    graph = read_blob(segment_bytes(compiled.pte, program, header, delegate.processed.index)).graph
    converts = [n for n in graph.xnodes if type(n.node).__name__ == "Convert"]
    assert len(converts) == 2  # the float input to int8 and the int8 result to float: none around the concat
    with torch.no_grad():
        expected = converted(*samples[0]).numpy()
    (actual,) = Program(compiled.pte).load_method("forward")(samples[0][0].numpy())
    step = float(np.abs(expected).max()) / 127
    np.testing.assert_allclose(actual, expected, rtol=0, atol=2 * step)


class Conv1dStack(torch.nn.Module):
    """wav2letter's shape in small: Conv1d + ReLU layers (a wide strided kernel, a depthwise one), log_softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Conv1d(5, 12, 9, stride=2, padding=4), torch.nn.ReLU(),
            torch.nn.Conv1d(12, 12, 5, padding=2, groups=12), torch.nn.ReLU(),
            torch.nn.Conv1d(12, 16, 7, padding=3, dilation=2), torch.nn.ReLU(),
            torch.nn.Conv1d(16, 6, 1), torch.nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.layers(x), dim=1)


def _delegate_graphs(pte: bytes) -> list[g.XNNGraph]:
    from etbuild.backends.xnnpack.format.blob import read_blob
    from etbuild.runtime.format.pte import segment_bytes

    program, header = read_program(pte)
    return [read_blob(segment_bytes(pte, program, header, d.processed.index)).graph
            for d in program.execution_plan[0].delegates]


def test_a_conv1d_stack_runs_along_the_height_axis_with_one_transpose_each_way():
    """XNNPACK runs a 1×K kernel over one row several times slower than a K×1 kernel over one
    column (3.3× on a wav2letter-sized stack): each 1-D convolution is a 2-D one of width 1,
    the values stay [N, L, 1, C] between them, and each ReLU is the convolution's output range."""
    torch.manual_seed(0)
    module, inputs = Conv1dStack(), (torch.randn(2, 5, 40),)
    compiled = _compile(module, inputs)
    (graph,) = _delegate_graphs(compiled.pte)
    kinds = [type(n.node).__name__ for n in graph.xnodes]
    convs = [n for n in graph.xnodes if type(n.node).__name__ in ("Conv2d", "DepthwiseConv2d")]
    assert len(convs) == 4 and kinds.count("StaticTranspose") == 2 and "Clamp" not in kinds, kinds
    for n in convs:
        dims = graph.xvalues[n.node.input1_id].value.dims
        assert (n.node.kernel_width, n.node.subsampling_width, n.node.dilation_width, dims[2]) == (1, 1, 1, 1)
        assert n.output_min_max is not None and n.output_min_max.output_min == 0.0
    assert [n.node.kernel_height for n in convs] == [9, 5, 7, 1]
    _check_in_both_runtimes(module, inputs, compiled.pte)


class GatedUpsample(torch.nn.Module):
    """LR-ASPP's head in small: a sigmoid gate from pooled features, bilinear upsampling, an add."""

    def __init__(self, align_corners: bool) -> None:
        super().__init__()
        self.align_corners = align_corners
        self.cbr, self.scale = torch.nn.Conv2d(8, 6, 1), torch.nn.Conv2d(8, 6, 1)
        self.low, self.high = torch.nn.Conv2d(4, 3, 1), torch.nn.Conv2d(6, 3, 1)

    def forward(self, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.cbr(high)) * torch.sigmoid(self.scale(high.mean((2, 3), keepdim=True)))
        x = torch.nn.functional.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=self.align_corners)
        y = self.low(low) + self.high(x)
        return torch.nn.functional.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=self.align_corners)


@pytest.mark.parametrize("align_corners", [False, True])
def test_bilinear_upsampling_is_a_resize_node_in_the_one_delegate(align_corners):
    """A bilinear upsample left outside split LR-ASPP's head into delegates with portable resizes
    between them; taken, the head is one delegate, resizing NHWC values where they are."""
    torch.manual_seed(0)
    module, inputs = GatedUpsample(align_corners), (torch.randn(1, 4, 9, 11), torch.randn(1, 8, 3, 4))
    compiled = _compile(module, inputs)
    program, _ = read_program(compiled.pte)
    assert len(program.execution_plan[0].delegates) == 1 and not program.execution_plan[0].operators
    (graph,) = _delegate_graphs(compiled.pte)
    resizes = [n.node for n in graph.xnodes if isinstance(n.node, g.StaticResizeBilinear2D)]
    assert [(r.new_height, r.new_width, r.flags) for r in resizes] == [(9, 11, 8 * align_corners),
                                                                      (18, 22, 8 * align_corners)]
    assert sum(isinstance(n.node, g.StaticTranspose) for n in graph.xnodes) == 3  # two inputs in, one output out
    _check_in_both_runtimes(module, inputs, compiled.pte)


class HardswishBlock(torch.nn.Module):
    """MobileNetV3's activation between two convolutions, and once at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.act, self.conv2 = torch.nn.Conv2d(3, 8, 3), torch.nn.Hardswish(), torch.nn.Conv2d(8, 4, 1)
        self.head = torch.nn.Hardswish()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv2(self.act(self.conv1(x))))


def test_hardswish_is_one_xnnpack_node_and_decomposed_where_no_delegate_takes_it():
    """torch's core decomposition splits hardswish into four calls (x · clamp(x + 3, 0, 6) / 6);
    the delegate keeps it one Hardswish node, as ExecuTorch's lowering does; excluded from the
    delegate it still runs, decomposed into kernels ExecuTorch's runtime has."""
    torch.manual_seed(0)
    module, inputs = HardswishBlock(), (torch.randn(1, 3, 9, 9) * 4,)
    compiled = _compile(module, inputs)
    (graph,) = _delegate_graphs(compiled.pte)
    kinds = [type(n.node).__name__ for n in graph.xnodes]
    assert kinds.count("Hardswish") == 2 and not {"Div", "Multiply", "Clamp", "Add"} & set(kinds), kinds
    _check_in_both_runtimes(module, inputs, compiled.pte)
    excluded = _compile(module, inputs, (BackendConfig("xnnpack", {"exclude": ["head"]}),))
    (outside,) = excluded.report.methods[0].outside
    assert outside.operator == "aten::hardswish"
    program, _ = read_program(excluded.pte)
    names = {op.name for op in program.execution_plan[0].operators}
    assert "aten::hardswish" not in names and "aten::clamp" in names, names
    _check_in_both_runtimes(module, inputs, excluded.pte)


class TanhGeluMlp(torch.nn.Module):
    """Gemma's MLP: gelu(gate(x), approximate='tanh') * up(x), then down."""

    def __init__(self, dim: int = 24, hidden: int = 40) -> None:
        super().__init__()
        self.gate, self.up, self.down = (torch.nn.Linear(dim, hidden), torch.nn.Linear(dim, hidden),
                                         torch.nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.gate(x), approximate="tanh") * self.up(x))


def test_tanh_gelu_is_taken_as_xnnpack_nodes_in_one_delegate():
    torch.manual_seed(0)
    module, inputs = TanhGeluMlp(), (torch.randn(3, 7, 24) * 3,)
    compiled = _compile(module, inputs)
    method = compiled.report.methods[0]
    assert (len(method.partitions), method.outside) == (1, ())
    assert method.partitions[0].backend_nodes["Tanh"] == 1
    _check_in_both_runtimes(module, inputs, compiled.pte)


def test_tanh_gelu_with_a_dynamic_token_count():
    torch.manual_seed(0)
    module = TanhGeluMlp()
    exported = torch.export.export(module.eval(), (torch.randn(1, 5, 24),),
                                   dynamic_shapes=({1: torch.export.Dim("n", min=1, max=16)},))
    compiled = compile_exported({"forward": exported}, backends=XNNPACK)
    method = compiled.report.methods[0]
    assert len(method.partitions) == 1 and {o.operator for o in method.outside} == {"aten::sym_size.int"}
    for n in (1, 9, 16):
        _check_in_both_runtimes(module, (torch.randn(1, n, 24) * 3,), compiled.pte)


class TrailingMean(torch.nn.Module):
    """RMSNorm's core: x scaled by the mean of its squares over trailing dims."""

    def __init__(self, dims: tuple[int, ...], keepdim: bool) -> None:
        super().__init__()
        self.dims, self.keepdim = dims, keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.pow(2).mean(self.dims, keepdim=self.keepdim)
        return x * torch.rsqrt(mean + 1e-6) if self.keepdim else torch.rsqrt(mean + 1e-6)


@pytest.mark.parametrize("dims, keepdim, reshapes", [((-1,), True, 0), ((-1,), False, 1), ((-2, -1), True, 4)])
def test_a_mean_over_the_last_dim_reads_the_rows_as_they_are(dims, keepdim, reshapes):
    """FullyConnected reads rows of its last dim under any leading dims: a mean over the last dim needs no
    reshape before it, nor one after it for the broadcast (without keepdim, one to drop the reduced dim; over
    two dims, one to join them and one to broadcast back, and the two of a row of 80 summed in chunks)."""
    torch.manual_seed(0)
    module, inputs = TrailingMean(dims, keepdim), (torch.randn(2, 5, 16),)
    compiled = _compile(module, inputs)
    (partition,) = compiled.report.methods[0].partitions
    assert partition.backend_nodes.get("StaticReshape", 0) == reshapes
    _check_in_both_runtimes(module, inputs, compiled.pte)


@pytest.mark.parametrize("width, products", [(64, 1), (67, 1), (80, 2), (512, 2), (896, 2), (4096, 2)])
def test_a_long_row_is_summed_in_two_small_products(width, products):
    """A row longer than 64 that splits into chunks of 8 to 64 is summed chunk by chunk, then the chunks'
    sums (filters of a few KiB instead of 64 bytes per element); a short or prime-length row in one product."""
    from etbuild.backends.xnnpack.aot.ops.pooling import _chunk

    chunk = _chunk(width)
    assert (chunk is None) == (products == 1) and (chunk is None or (width % chunk == 0 and 8 <= chunk <= 64))
    torch.manual_seed(0)
    module, inputs = TrailingMean((-1,), True), (torch.randn(3, 2, width) + 0.5,)
    compiled = _compile(module, inputs)
    (partition,) = compiled.report.methods[0].partitions
    assert partition.backend_nodes["FullyConnected"] == products
    _check_in_both_runtimes(module, inputs, compiled.pte)


def test_a_wide_layer_norm_sums_its_mean_and_variance_in_chunks():
    torch.manual_seed(0)
    module, inputs = torch.nn.LayerNorm(768), (torch.randn(2, 3, 768),)
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5)
        module.bias.uniform_(-0.5, 0.5)
    compiled = _compile(module, inputs)
    (partition,) = compiled.report.methods[0].partitions
    assert partition.backend_nodes["FullyConnected"] == 4  # mean and variance, two products each
    _check_in_both_runtimes(module, inputs, compiled.pte)
