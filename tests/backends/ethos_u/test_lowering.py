"""TOSA lowering and Vela per target: each TOSA graph against the quantized torch model in the reference
model (within one quantization step, as ExecuTorch's Arm tests judge), U55's limits kept out of the
delegate, and a whole Ethos-U program run in our runtime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("tosa_serializer")
pytest.importorskip("tosa_reference_model")
pytest.importorskip("ethosu.vela")

from etbuild.backends.ethos_u.format.blob import parse  # noqa: E402
from etbuild.backends.tosa.format import block_io  # noqa: E402
from etbuild.backends.tosa.runtime.reference import ReferenceGraph  # noqa: E402
from tests.backends.ethos_u.support import int8_edges, lowered  # noqa: E402


class Audio(nn.Module):
    """Conv1d → ReLU → MaxPool1d (an odd length: TOSA's exact windows) → mean → linear, as the zoo's kws."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv1d(8, 16, 3, padding=1), nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.max_pool1d(torch.relu(self.conv(x)), 2)
        return self.fc(y.mean(-1))


class Residual(nn.Module):
    """Strided conv (odd size), depthwise conv, ReLU6 and a residual add, as MobileNetV2's blocks."""

    def __init__(self, stride: int = 2) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=stride, padding=1)
        self.dw, self.pw = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.hardtanh(self.stem(x), 0.0, 6.0)
        return y + self.pw(nn.functional.hardtanh(self.dw(y), 0.0, 6.0))


CASES = [(Audio, (1, 8, 21)), (Residual, (1, 3, 15, 15))]


@pytest.mark.parametrize(("model", "shape"), CASES)
def test_each_tosa_graph_is_within_one_step_of_the_quantized_model(model, shape) -> None:
    torch.manual_seed(1)
    x = torch.randn(shape)
    found = lowered(model(), (x,), "tosa")
    assert len(found.processed) == 1 and found.report.outside[0].node == "quantize_per_tensor"
    q_in, q_out = int8_edges(found.converted, x)
    (out,) = ReferenceGraph(found.processed[0].blob).run([q_in])
    assert out.dtype == np.int8 and out.shape == q_out.shape
    assert np.abs(out.astype(np.int32) - q_out).max() <= 1


def test_u55_keeps_a_stride_it_cannot_run_on_the_cpu_and_u85_takes_it() -> None:
    x = (torch.randn(1, 3, 15, 15),)
    u55 = lowered(Residual(stride=3), x, "ethos-u", target="ethos-u55-128")
    reasons = {o.node: o.reason for o in u55.report.outside}
    assert reasons["convolution"] == "ethos-u55-128 convolutions take strides (1,1) and (2,2); this one has (3, 3)"
    assert len(u55.processed) == 1  # the rest still compiles with Vela
    u85 = lowered(Residual(stride=3), x, "ethos-u", target="ethos-u85-256")
    assert "convolution" not in {o.node for o in u85.report.outside} and len(u85.processed) == 1


def test_an_ethos_u_delegate_carries_executorchs_specs_and_its_tosa_graph() -> None:
    x = torch.randn(1, 8, 21)
    found = lowered(Audio(), (x,), "ethos-u", target="ethos-u85-256")
    processed = found.processed[0]
    assert [key for key, _ in processed.compile_specs] == [
        "tosa_spec", "compile_flags", "output_format", "preserve_io_quantization", "target"]
    assert dict(processed.compile_specs)["compile_flags"] == (
        b"--accelerator-config=ethos-u85-256 --config=Arm/vela.ini --output-format=raw "
        b"--system-config=Ethos_U85_SYS_DRAM_Mid --memory-mode=Sram_Only")
    blob = parse(processed.blob)
    assert blob.cmd_data[:4] == b"COP1" and blob.inputs[0].shape == (1, 1, 1, 1, 8, 21)
    (tosa,) = processed.named_data.values()
    assert [len(names) for names in block_io(tosa)] == [1, 1]


def test_a_tosa_program_runs_in_our_runtime(tmp_path) -> None:
    from etbuild.pipeline import compile_exported
    from etbuild.recipe import BackendConfig
    from etbuild.runtime.program import Program
    from tests.backends.ethos_u.support import output_params, quantized

    torch.manual_seed(2)
    x = torch.randn(1, 8, 21)
    converted, exported = quantized(Audio(), (x,))
    compiled = compile_exported({"forward": exported}, backends=[BackendConfig("tosa", {})])
    (tmp_path / "p.pte").write_bytes(compiled.pte)
    (out,) = Program.load(tmp_path / "p.pte").load_method("forward")(x.numpy())
    _, q_out = int8_edges(converted, x)
    scale, zero = output_params(converted)
    assert np.abs(out / scale + zero - q_out).max() <= 1.001
