"""etbuild.tools.profile and `etbuild profile`: per-step medians, tables and the Chrome trace's shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from etbuild.cli import main
from etbuild.devtools.instrument import generated_inputs
from etbuild.kernels import native
from etbuild.model import build_model, example_inputs
from etbuild.pipeline import compile_module
from etbuild.recipe import load_recipe
from etbuild.runtime import Program
from etbuild.tools.profile import INSTRUCTION, Recorder, _rewrap_on_bind, profile_method
from tests.conftest import requires_executorch

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def _check_trace(trace: dict[str, Any], instructions: int, calls: int) -> list[dict[str, Any]]:
    """The trace is Chrome's Trace Event Format; its complete events nest within their calls."""
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["ph"] for e in events} == {"X", "M"}
    for e in complete:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["args"], dict)
    spans = [e for e in complete if e["cat"] == "call"]
    assert len(spans) == calls
    steps = [e for e in complete if e["cat"] == "instruction"]
    assert {e["args"]["instruction"] for e in steps} == set(range(instructions))
    for e in steps:
        assert any(c["ts"] - 0.01 <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + 0.01 for c in spans)
    return complete


def _profile_cli(pte: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, dict]:
    trace = tmp_path / "trace.json"
    assert main(["profile", str(pte), "--calls", "3", "--top", "5", "--trace", str(trace), *extra]) == 0
    return capsys.readouterr().out, json.loads(trace.read_text())


def test_profile_small_mlp_prints_tables_and_writes_a_trace(small_mlp_pte, tmp_path, capsys):
    out, trace = _profile_cli(small_mlp_pte, tmp_path, capsys)
    plan = Program.load(small_mlp_pte).plan("forward")
    n = len(plan.chains[0].instructions)
    assert "method 'forward': 3 calls" in out and "aten::addmm.out" in out
    assert "[2x16]" in out  # shapes of the first layer's input
    complete = _check_trace(trace, n, 3)
    first = next(e for e in complete if e["cat"] == "instruction" and e["args"]["instruction"] == 0)
    assert first["name"] == "aten::addmm.out" and [2, 16] in first["args"]["inputs"]


def test_profile_with_inputs_from_an_npz(small_mlp_pte, tmp_path, capsys):
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", in0=x)
    out, _ = _profile_cli(small_mlp_pte, tmp_path, capsys, "--inputs", str(tmp_path / "in.npz"))
    assert "3 calls" in out


def test_profile_of_the_cnn_recipe(tmp_path, capsys):
    recipe = load_recipe(RECIPES / "cnn.yaml")
    torch.manual_seed(0)
    pte = tmp_path / "cnn.pte"
    pte.write_bytes(compile_module(build_model(recipe), example_inputs(recipe, "forward")).pte)
    out, trace = _profile_cli(pte, tmp_path, capsys)
    assert "aten::convolution.out" in out.split("\n\n")[1]  # in the operator table
    n = len(Program.load(pte).plan("forward").chains[0].instructions)
    names = {e["name"] for e in _check_trace(trace, n, 3)}
    assert {"aten::convolution.out", "aten::addmm.out"} <= names


def test_generated_inputs_follow_the_metadata_and_the_seed(small_mlp_pte):
    method = Program.load(small_mlp_pte).load_method()
    a, b = generated_inputs(method, 0), generated_inputs(method, 0)
    assert [x.shape for x in a] == [(2, 16)] and a[0].dtype == np.float32
    assert np.array_equal(a[0], b[0]) and not np.array_equal(a[0], generated_inputs(method, 1)[0])


def test_medians_sum_loop_executions_and_cover_every_instruction(small_mlp_pte):
    method = Program.load(small_mlp_pte).load_method()
    p = profile_method(method, generated_inputs(method), calls=4)
    n = len(method.plan.chains[0].instructions)
    assert [e.instruction for e in p.entries] == list(range(n))
    assert all(e.node == INSTRUCTION and e.runs == 1 and e.median_us > 0 for e in p.entries)
    assert len(p.events) == 4 * n and len(p.call_spans) == 4
    assert sum(e.median_us for e in p.entries) <= p.call_us * 1.5


class _Handle:
    """A delegate handle as the profiler sees one: bound steps that a new binding replaces."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.bind("a")

    def bind(self, tag: str) -> None:
        self.steps = [lambda: self.log.append(f"{tag}0"), lambda: self.log.append(f"{tag}1")]
        self.step_names = ["node 0 (Add)", "node 1 (Mul)"]

    def execute(self) -> None:
        for step in self.steps:
            step()


def test_delegate_steps_stay_timed_after_the_handle_binds_again():
    handle, rec = _Handle(), Recorder()
    _rewrap_on_bind(handle, lambda j, step: rec.wrap((0, j), step))
    handle.execute()
    handle.bind("b")  # a call with new arrays binds new steps
    handle.execute()
    assert handle.log == ["a0", "a1", "b0", "b1"]
    assert len(rec.current[(0, 0)]) == 2 and len(rec.current[(0, 1)]) == 2
    assert isinstance(handle, _Handle)


def test_profile_imports_no_torch(small_mlp_pte, tmp_path):
    args = ["profile", str(small_mlp_pte), "--calls", "2", "--trace", str(tmp_path / "t.json")]
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "from etbuild.cli import main\n"
        f"assert main({args!r}) == 0\n"
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "t.json").exists()


@requires_executorch
def test_profile_an_executorch_built_program(executorch_small_mlp_pte, tmp_path, capsys):
    out, trace = _profile_cli(executorch_small_mlp_pte, tmp_path, capsys)
    n = len(Program.load(executorch_small_mlp_pte).plan("forward").chains[0].instructions)
    _check_trace(trace, n, 3)
    assert "aten::" in out


@requires_executorch
def test_profile_times_the_nodes_inside_an_xnnpack_delegate(tmp_path, capsys):
    from tests.backends.xnnpack.oracle import lower

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
    pte = lower(model, (torch.randn(1, 3, 16, 16),)).save(tmp_path / "xnn.pte")
    out, trace = _profile_cli(pte, tmp_path, capsys)
    assert "XnnpackBackend:Conv2d" in out
    complete = _check_trace(trace, len(Program.load(pte).plan("forward").chains[0].instructions), 3)
    delegate = [e for e in complete if e["cat"] == "instruction" and e["name"] == "delegate XnnpackBackend"]
    nodes = [e for e in complete if e["cat"] == "delegate node"]
    assert delegate and len(nodes) >= 2 * 3
    assert {e["name"] for e in nodes} >= {"XnnpackBackend:Conv2d"}
    for e in nodes:  # each node nests inside a call of its delegate instruction
        assert any(d["ts"] - 0.01 <= e["ts"] and e["ts"] + e["dur"] <= d["ts"] + d["dur"] + 0.01 for d in delegate)


@requires_executorch
def test_profile_names_nodes_bound_as_one_step(tmp_path, capsys):
    """A FullyConnected and the Gelu bound with it (ops/epilogue.py) count as one group named after both."""
    from tests.backends.xnnpack.oracle import lower

    if native.loops() is None:
        pytest.skip("numba is not installed")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    pte = lower(model, (torch.randn(4, 16),)).save(tmp_path / "xnn.pte")
    out, _ = _profile_cli(pte, tmp_path, capsys)
    assert "XnnpackBackend:FullyConnected+Gelu" in out
    assert "node 0 (FullyConnected) + node 1 (Gelu)" in out
