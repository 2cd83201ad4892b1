"""etbuild.verify.localise and the debug map: a wrong kernel is traced to its node, module and shapes."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from etbuild.build.driver import build
from etbuild.build.layout import Artifacts
from etbuild.errors import StageError, VerificationError
from etbuild.lowering.debug_map import read_debug_map, to_json
from etbuild.pipeline import compile_module
from etbuild.recipe import load_recipe
from etbuild.runtime import Program
from etbuild.runtime.kernel_registry import KernelInfo, load_all
from etbuild.verify import stage as verify
from etbuild.verify.localise import NO_DIVERGENCE, Divergence, localise, localise_recipe, reference_graphs


class Block(torch.nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(cout)
        self.act = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Net(torch.nn.Module):
    """Two conv blocks (BatchNorm folded by lowering), a pooled linear head, a sigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(Block(3, 8), Block(8, 8))
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean((2, 3))).sigmoid()


def _wrong(kernels: dict[str, KernelInfo], name: str, fn: Any) -> dict[str, KernelInfo]:
    """The registry with the kernel `name` replaced by fn (same arguments, other numbers; no
    load-time fast path or view, which would compute what the real kernel does)."""
    info = kernels[name]
    fn.__annotations__ = info.fn.__annotations__
    return {**kernels, name: dataclasses.replace(info, fn=fn, fast=None, view=None)}


def _scaled_relu(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.copyto(out, np.maximum(self, 0) * 1.01)
    return out


def _relu_of_the_second_block(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.copyto(out, np.maximum(self, 0))
    if self.shape[1] == 8 and _relu_of_the_second_block.calls % 2:  # every second relu call: the second block
        out += 0.5
    _relu_of_the_second_block.calls += 1
    return out


@pytest.fixture(scope="module")
def net() -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(1, 3, 10, 10)
    compiled = compile_module(model, (x,))
    graph = reference_graphs({"forward": torch.export.export(model, (x,), strict=False)}).methods[0]
    return compiled, graph, x


def test_a_correct_program_has_no_divergence(net):
    compiled, graph, x = net
    assert localise(Program.from_bytes(compiled.pte), graph, compiled.debug["forward"], [(x,)], 1e-4, 1e-5) is None


def test_a_wrong_kernel_is_found_at_its_first_call(net):
    compiled, graph, x = net
    kernels = _wrong(load_all(), "aten::relu.out", _scaled_relu)
    found = localise(Program.from_bytes(compiled.pte), graph, compiled.debug["forward"], [(x,)], 1e-4, 1e-5, kernels)
    assert isinstance(found, Divergence)
    assert (found.node, found.operator, found.module, found.module_type) == (
        "relu", "aten.relu.default", "encoder.0.act", "ReLU")
    assert found.input_shapes == [[1, 8, 10, 10]] and found.shape == [1, 8, 10, 10]
    assert found.max_abs_error > found.tolerance
    assert found.describe().startswith("first divergence: method 'forward' sample 0, instruction ")
    assert "node relu (aten.relu.default) in encoder.0.act (ReLU)" in found.describe()


def test_the_first_divergence_is_reported_not_what_it_spreads_to(net):
    compiled, graph, x = net
    _relu_of_the_second_block.calls = 0
    kernels = _wrong(load_all(), "aten::relu.out", _relu_of_the_second_block)
    found = localise(Program.from_bytes(compiled.pte), graph, compiled.debug["forward"], [(x,)], 1e-4, 1e-5, kernels)
    assert found is not None and found.module == "encoder.1.act"  # not the head or the sigmoid after it


def test_the_debug_map_names_every_computed_value_and_leaves_the_pte_alone(net):
    compiled, graph, x = net
    debug = compiled.debug["forward"]
    plan = Program.from_bytes(compiled.pte).plan("forward")
    results = {ins.instr_args.args[-1] for ins in plan.chains[0].instructions}
    assert results <= set(debug)
    assert {s.module for s in debug.values()} >= {"encoder.0.conv", "encoder.1.act", "head", "<root>"}
    again = compile_module(*_same_net())
    assert again.pte == compiled.pte and to_json(again.debug) == to_json(compiled.debug)


def _same_net() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 3, 10, 10),)


RECIPE = """\
name: tiny
model:
  factory: etbuild.zoo:mlp
  kwargs: {sizes: [12, 24, 6]}
  inputs: [{shape: [3, 12], dtype: float32}]
verify: {samples: 2, rtol: 1.0e-4, atol: 1.0e-5}
"""


def test_a_failing_verify_reports_the_first_divergence(tmp_path, monkeypatch):
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(RECIPE)
    assert build([recipe_path], tmp_path / "build", stream=io.StringIO()).exit_code == 0
    recipe = load_recipe(recipe_path)
    a = Artifacts.of(recipe, tmp_path / "build")
    assert set(read_debug_map(a.debug_map)) == {"forward"}
    wrong = _wrong(load_all(), "aten::relu.out", _scaled_relu)
    # the wrong kernel in both runtimes: the trimmed one verify runs, and the full one localisation runs
    monkeypatch.setattr("etbuild.runtime.program.load_all", lambda: wrong)
    monkeypatch.setattr(verify, "trimmed_runner", lambda runtime, data=(): _in_process)
    with pytest.raises(VerificationError) as err:
        verify.run_verify(recipe, a.pte, a.runtime_zip, a.verify, a.exports, a.debug_map)
    message = str(err.value)
    assert "differs from eager PyTorch" in message
    assert "first divergence: method 'forward' sample 0" in message and "(aten.relu.default) in 1 (ReLU)" in message
    report = json.loads(a.verify.read_text())
    first = report["first_divergence"]["forward"]
    assert (first["operator"], first["module"], first["input_shapes"]) == ("aten.relu.default", "1", [[3, 24]])


def test_a_verify_failure_without_a_divergence_says_where_to_look(tmp_path, monkeypatch):
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(RECIPE)
    assert build([recipe_path], tmp_path / "build", stream=io.StringIO()).exit_code == 0
    recipe = load_recipe(recipe_path)
    a = Artifacts.of(recipe, tmp_path / "build")

    def off_by_one(pte: Path, ins: Path, outs: Path, method: str) -> None:
        _in_process(pte, ins, outs, method, shift=1.0)

    monkeypatch.setattr(verify, "trimmed_runner", lambda runtime, data=(): off_by_one)
    with pytest.raises(VerificationError, match="every value matches the lowered torch graph"):
        verify.run_verify(recipe, a.pte, a.runtime_zip, a.verify, a.exports, a.debug_map)
    assert json.loads(a.verify.read_text())["first_divergence"]["forward"] == {"note": NO_DIVERGENCE}


def _in_process(pte: Path, ins: Path, outs: Path, method: str, shift: float = 0.0) -> None:
    """A verify runner (`s<j>_in<k>` → `s<j>_out<k>`) in this process's full runtime, outputs + shift."""
    m = Program.load(pte).load_method(method)
    with np.load(ins) as npz:
        count = len({k.split("_")[0] for k in npz.files})
        samples = [[npz[f"s{j}_in{k}"] for k in range(len([f for f in npz.files if f.startswith(f"s{j}_")]))]
                   for j in range(count)]
    np.savez(outs, **{f"s{j}_out{k}": o + shift for j, s in enumerate(samples) for k, o in enumerate(m(*s))})


class Stateful(torch.nn.Module):
    """A running sum in a mutable buffer: each call's output depends on the calls before it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x)
        return torch.relu(self.total * 2)


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t.relu() + 1, lambda t: t.sigmoid() * 3, (x,))


@pytest.mark.parametrize(("make", "operator"), [(Stateful, "aten.relu.default"), (Branchy, "cond")])
def test_state_and_branches_match_their_reference(make, operator):
    """State carried across samples and torch.cond's branches are followed by the reference too;
    a fault inside a branch is reported at its cond (branch nodes have no value in the map)."""
    torch.manual_seed(0)
    x = torch.randn(4)
    compiled = compile_module(make().eval(), (x,))
    graph = reference_graphs({"forward": torch.export.export(make().eval(), (x,), strict=False)}).methods[0]
    samples = [(torch.randn(4),) for _ in range(3)] + [(-torch.ones(4),), (torch.ones(4),)]
    program = Program.from_bytes(compiled.pte)
    assert localise(program, graph, compiled.debug["forward"], samples, 1e-4, 1e-5) is None
    kernels = _wrong(load_all(), "aten::relu.out", _scaled_relu)
    found = localise(Program.from_bytes(compiled.pte), graph, compiled.debug["forward"], samples, 1e-4, 1e-5, kernels)
    assert found is not None and found.operator == operator


def test_an_unreadable_debug_map_is_a_stage_error_naming_it(tmp_path):
    bad = tmp_path / "lowered.debug.json"
    bad.write_text('{"version": 99, "methods": {}}')
    with pytest.raises(StageError, match=r"lowered.debug.json: not a debug map of the lower stage \(version 99"):
        read_debug_map(bad)


def test_localisation_that_cannot_run_leaves_a_note(tmp_path):
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(RECIPE)
    notes = localise_recipe(load_recipe(recipe_path), tmp_path / "x.pte", {}, tmp_path / "missing.json", ["forward"])
    assert notes["forward"]["note"].startswith("localisation failed: StageError: ")
    assert "missing.json: not a debug map of the lower stage" in notes["forward"]["note"]
