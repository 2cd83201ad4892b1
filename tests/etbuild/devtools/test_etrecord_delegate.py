"""Inside an XNNPACK delegate: the build's ETRecord maps each node's profile event to the calls it
lowers, so ExecuTorch's Inspector names XNNPACK's own events (`Convolution (NHWC, F32) IGEMM #1`)
with the operators and module paths of the user's model, for ExecuTorch's ETDump of our `.pte`
and for our runtime's; our `--from` view names the same modules. Skipped without executorch."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from torch import nn

from etbuild.backends.xnnpack.aot.debug import operator_names
from etbuild.build.driver import build
from etbuild.cli import main
from etbuild.devtools import etdump_format as ed
from etbuild.devtools.etdump_profile import etrecord_modules, etrecord_node_modules, from_etdump
from etbuild.devtools.etrecord_format import ROOT
from etbuild.runtime import Program
from etbuild.tools.profile import generated_inputs
from tests.conftest import requires_executorch

NAME = "conv-relu-linear-xnnpack"


class ConvReluLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.relu = nn.ReLU()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 6 * 6, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.relu(self.conv(x))).sigmoid()


def conv_relu_linear() -> nn.Module:
    torch.manual_seed(0)
    return ConvReluLinear().eval()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("etrecord-delegate")
    recipe = root / f"{NAME}.yaml"
    recipe.write_text(f"name: {NAME}\nmodel:\n  factory: {Path(__file__).resolve()}:conv_relu_linear\n"
                      "  inputs: [{shape: [1, 3, 8, 8], dtype: float32}]\nbackends: [{name: xnnpack}]\n")
    assert build([recipe], root / "build", stream=io.StringIO()).exit_code == 0
    return root / "build" / NAME


def _node_events(etdump: Path, etrecord: Path) -> dict[str, tuple[set[str], set[str]]]:
    """The Inspector's delegate-node events: id → (innermost module paths, operator types)."""
    from executorch.devtools import Inspector

    out = {}
    for block in Inspector(etdump_path=str(etdump), etrecord=str(etrecord)).event_blocks:
        for e in block.events:
            if block.name == "Execute" and e.is_delegated_op:
                paths = {list(stack.values())[-1][0] for stack in e.module_hierarchy.values() if stack}
                out[str(e.delegate_debug_identifier)] = (paths, set(e.op_types))
    return out


def _from_view(etdump: Path, pte: Path, etrecord: Path) -> dict[str, set[str]]:
    """Our `--from` view's modules per delegate node id."""
    plan = Program.load(pte).plan("forward")
    nodes = etrecord_node_modules(etrecord, plan)
    from_etdump(ed.read_etdump(etdump.read_bytes()), plan, str(etdump), None, etrecord_modules(etrecord, plan), nodes)
    return {ident: {"" if p == ROOT else p for p in paths} for (_, ident), paths in nodes.items()}


@requires_executorch
def test_the_inspector_names_xnnpacks_own_events_with_module_paths(built: Path, tmp_path: Path) -> None:
    from etbuild.verify.oracle_etdump import executorch_etdump

    pte, etrecord = built / f"{NAME}.pte", built / "etrecord.bin"
    dump = executorch_etdump(pte, generated_inputs(Program.load(pte).load_method("forward")),
                             tmp_path / "device.etdump", calls=2)
    events = _node_events(dump, etrecord)
    assert set(events) == {"Transpose (ND, X32) #1", "Convolution (NHWC, F32) IGEMM #1", "Transpose (ND, X32) #2",
                           "Static Reshape (NC) #1", "Fully Connected (NC, F32) GEMM #1", "Sigmoid (NC) #1"}
    conv_paths, conv_ops = events["Convolution (NHWC, F32) IGEMM #1"]
    assert conv_paths == {"conv", "relu"} and conv_ops == {"convolution.default", "relu.default"}
    assert events["Fully Connected (NC, F32) GEMM #1"][0] == {"head.1"}
    assert "sigmoid.default" in events["Sigmoid (NC) #1"][1]
    assert all(paths and ops for paths, ops in events.values())
    view = _from_view(dump, pte, etrecord)
    assert {ident: paths for ident, (paths, _) in events.items()} == {i: view[i] for i in events}


@requires_executorch
def test_our_runtimes_node_events_are_named_too(built: Path, tmp_path: Path, capsys) -> None:
    pte, etrecord = built / f"{NAME}.pte", built / "etrecord.bin"
    dump = tmp_path / "ours.etdump"
    assert main(["profile", str(pte), "--etdump", str(dump)]) == 0
    events = _node_events(dump, etrecord)
    assert events and all(ident.startswith("node ") and paths for ident, (paths, _) in events.items())
    assert any(paths == {"conv", "relu"} for paths, _ in events.values())
    capsys.readouterr()
    assert main(["profile", str(pte), "--from", str(dump)]) == 0
    assert "(conv, relu)" in capsys.readouterr().out
    assert {i: p for i, (p, _) in events.items()} == {i: _from_view(dump, pte, etrecord)[i] for i in events}


def test_the_predicted_names_are_one_per_operator_xnnpack_runs(built: Path) -> None:
    from etbuild.backends.xnnpack.format.blob import read_blob
    from etbuild.runtime.format.pte import read_program, segment_bytes

    data = (built / f"{NAME}.pte").read_bytes()
    program, header = read_program(data)
    segment = program.execution_plan[0].delegates[0].processed.index
    graph = read_blob(segment_bytes(data, program, header, segment)).graph
    assert operator_names(graph) == ["Transpose (ND, X32) #1", "Convolution (NHWC, F32) IGEMM #1",
                                     "Transpose (ND, X32) #2", "Static Reshape (NC) #1",
                                     "Fully Connected (NC, F32) GEMM #1", "Sigmoid (NC) #1"]
    assert all(x.debug_handle > 0 for x in graph.xnodes)
