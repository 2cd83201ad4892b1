"""A whole Ethos-U program: run in our runtime (the TOSA reference model), its delegates' memory for
memory.json and the SRAM budget, the extra a build without tosa-tools asks for, and an ExecuTorch-built
blob read by the same layout rules (slow: ExecuTorch's Arm flow)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torch import nn

from etbuild.backends.tosa.aot.builder import TosaBuilder
from etbuild.errors import RecipeError, UsageError
from etbuild.memory.delegates import check_fastest_level
from etbuild.recipe import LevelConfig


def test_lowering_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tosa_serializer", None)
    with pytest.raises(UsageError, match=r"install it with: pip install 'etbuild\[ethos-u\]'"):
        TosaBuilder()


def test_the_fastest_level_holds_cpu_arenas_and_the_largest_npu_scratch() -> None:
    reports = [{"method": "forward", "delegate": 0, "backend": "ethos-u", "fast_bytes": 17552}]
    check_fastest_level([LevelConfig("sram", 20000), LevelConfig("dram")], 2000, reports)
    with pytest.raises(RecipeError) as caught:
        check_fastest_level([LevelConfig("sram", 16384), LevelConfig("dram")], 2000, reports)
    assert str(caught.value) == (
        "memory.levels[0].bytes: level sram holds 16384 bytes, but the CPU's arenas planned there take 2000 and "
        "ethos-u delegate 0 of method forward needs 17552 more for its working memory (19552 in all)")


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


@pytest.fixture(scope="module")
def program() -> tuple[bytes, torch.fx.GraphModule, torch.Tensor]:
    pytest.importorskip("tosa_serializer")
    pytest.importorskip("tosa_reference_model")
    pytest.importorskip("ethosu.vela")
    from etbuild.pipeline import compile_exported
    from etbuild.recipe import BackendConfig
    from tests.backends.ethos_u.support import quantized

    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    converted, exported = quantized(Small(), (x,))
    compiled = compile_exported({"forward": exported},
                                backends=[BackendConfig("ethos-u", {"target": "ethos-u55-128"})])
    return compiled.pte, converted, x


def test_our_runtime_runs_an_ethos_u_program_through_its_tosa_graph(program, tmp_path) -> None:
    from etbuild.runtime.program import Program
    from tests.backends.ethos_u.support import output_params

    pte, converted, x = program
    path = tmp_path / "small.pte"
    path.write_bytes(pte)
    (out,) = Program.load(path).load_method("forward")(x.numpy())
    expected = converted(x).detach().numpy()
    step, _ = output_params(converted)
    assert np.abs(out - expected).max() <= step * 1.001


def test_the_delegates_memory_and_velas_estimate(program) -> None:
    from etbuild.memory.delegates import delegate_reports
    from etbuild.runtime.format.pte import read_program

    pte, _, _ = program
    reports = delegate_reports(pte, *read_program(pte))
    (report,) = reports
    assert report["backend"] == "ethos-u" and report["memory_mode"] == "Shared_Sram"
    assert report["fast_bytes"] == report["scratch_bytes"] > 0
    assert report["read_only_bytes"] == report["command_bytes"] + report["weight_bytes"]
    assert report["vela"]["nn_macs"] > 0 and report["vela"]["cycles_total"] > 0
    assert report["simulation_bytes"] > 0  # the TOSA graph kept in the program for etbuild's simulation


def test_a_release_drops_the_tosa_graph_and_a_ptd_holding_it_runs_the_program(program, tmp_path) -> None:
    from etbuild.errors import InvalidProgram
    from etbuild.release.simulation import simulation_bytes, split_simulation
    from etbuild.runtime.delegates import processed_blob
    from etbuild.runtime.format.pte import read_program
    from etbuild.runtime.program import Program

    pte, _, x = program
    split = split_simulation(pte)
    assert simulation_bytes(pte) == split.dropped_bytes > 0 and simulation_bytes(split.pte) == 0
    assert len(split.pte) <= len(pte) - split.dropped_bytes

    def blob(data: bytes) -> bytes:
        ours, header = read_program(data)
        return bytes(processed_blob(data, ours, header, ours.execution_plan[0].delegates[0].processed, "0"))

    assert blob(split.pte) == blob(pte)  # what the NPU reads is unchanged
    full, lean, graphs = tmp_path / "full.pte", tmp_path / "lean.pte", tmp_path / "graphs.ptd"
    full.write_bytes(pte), lean.write_bytes(split.pte), graphs.write_bytes(split.ptd)
    with pytest.raises(InvalidProgram, match=r"its TOSA graph \(ethos_u\.tosa\.[0-9a-f]{64}\) is neither in the "
                                             r"program nor in a data file given.*pass that file with --data"):
        Program.load(lean).load_method("forward")
    (ran,) = Program.load(lean, [graphs]).load_method("forward")(x.numpy())
    (expected,) = Program.load(full).load_method("forward")(x.numpy())
    assert np.array_equal(ran, expected)


@pytest.mark.slow
def test_an_executorch_built_blob_reads_by_the_same_rules(program) -> None:
    """ExecuTorch's own Arm flow on the same model (its quantizer, partitioner, preprocess): its blob parses
    and packs back byte for byte, and its compile specs are ours, key for key and value for value."""
    pytest.importorskip("executorch.backends.arm.ethosu")
    from etbuild.backends.ethos_u.format.blob import pack, parse
    from etbuild.runtime.delegates import processed_blob
    from etbuild.runtime.format.pte import read_program
    from tests.backends.ethos_u.executorch_flow import executorch_delegate

    theirs_blob, theirs_specs = executorch_delegate(Small(), (torch.randn(1, 3, 8, 8),), "ethos-u55-128")
    assert pack(parse(theirs_blob)) == theirs_blob
    pte, _, _ = program
    ours, header = read_program(pte)
    delegate = ours.execution_plan[0].delegates[0]
    assert delegate.id == "EthosUBackend"
    assert [(s.key, bytes(s.value)) for s in delegate.compile_specs] == theirs_specs
    mine = parse(processed_blob(pte, ours, header, delegate.processed, "delegate 0"))
    assert mine.inputs[0].shape == parse(theirs_blob).inputs[0].shape


def test_profile_labels_the_simulation_and_puts_velas_estimate_beside_it(program, tmp_path, capsys) -> None:
    from etbuild.cli import main
    from etbuild.fsutil import write_json
    from etbuild.memory.delegates import delegate_reports
    from etbuild.runtime.format.pte import read_program

    pte, _, _ = program
    path = tmp_path / "small.pte"
    path.write_bytes(pte)
    assert main(["profile", str(path), "--calls", "1"]) == 0
    shown = capsys.readouterr().out
    assert "functional simulation, not NPU timing: TOSA graphs run in the TOSA reference model" in shown
    assert "— (no memory.json beside the .pte)" in shown
    (report,) = delegate_reports(pte, *read_program(pte))
    write_json(tmp_path / "memory.json", {"methods": {}, "delegates": [report]})
    assert main(["profile", str(path), "--calls", "1"]) == 0
    row = capsys.readouterr().out.splitlines()[-1].split()
    cycles = report["vela"]["cycles_total"]
    assert row[:3] == ["1", "EthosUBackend", "0"] and float(row[3].replace(",", "")) > 0
    assert row[4:7] == [f"{cycles:,.0f}", "cycles", "="]


def test_external_data_is_selected_only_when_a_delegate_reads_a_key_the_program_lacks(program) -> None:
    from etbuild.release.simulation import split_simulation
    from etbuild.runtime.format.pte import read_program
    from etbuild.select.features import program_features

    pte, _, _ = program
    assert "EXTERNAL_DATA" not in program_features(read_program(pte)[0], pte, read_program(pte)[1])
    lean = split_simulation(pte).pte  # its TOSA graph now lives in a .ptd
    assert "EXTERNAL_DATA" in program_features(read_program(lean)[0], lean, read_program(lean)[1])
    assert "EXTERNAL_DATA" in program_features(read_program(pte)[0])  # without the bytes: every delegate may
