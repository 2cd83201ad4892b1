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
from etbuild.devtools.etrecord_format import ROOT
from etbuild.devtools.instrument import generated_inputs
from etbuild.runtime import Program
from etbuild.tools.etdump_profile import etrecord_modules, etrecord_node_modules, from_etdump
from tests.conftest import requires_executorch

NAME, DYNAMIC = "conv-relu-linear-xnnpack", "conv-relu-linear-int8-dynamic-xnnpack"


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
def builds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model delegated to XNNPACK, float and int8-dynamic (its convolution and linear run qd8 x qc8)."""
    root = tmp_path_factory.mktemp("etrecord-delegate")
    recipes = []
    for name, extra in ((NAME, ""), (DYNAMIC, "quantize: {scheme: int8-dynamic}\n")):
        recipes.append(root / f"{name}.yaml")
        recipes[-1].write_text(f"name: {name}\nmodel:\n  factory: {Path(__file__).resolve()}:conv_relu_linear\n"
                               "  inputs: [{shape: [1, 3, 8, 8], dtype: float32}]\nbackends: [{name: xnnpack}]\n"
                               + extra)
    assert build(recipes, root / "build", stream=io.StringIO()).exit_code == 0
    return root / "build"


@pytest.fixture
def built(builds: Path) -> Path:
    return builds / NAME


def _device_etdump(built: Path, tmp_path: Path) -> Path:
    from etbuild.verify.oracle_etdump import executorch_etdump

    pte = built / f"{built.name}.pte"
    return executorch_etdump(pte, generated_inputs(Program.load(pte).load_method("forward")),
                             tmp_path / "device.etdump", calls=2)


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
    pte, etrecord = built / f"{NAME}.pte", built / "etrecord.bin"
    dump = _device_etdump(built, tmp_path)
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


@requires_executorch
@pytest.mark.parametrize("name", [NAME, DYNAMIC])
def test_the_predicted_ids_are_the_ones_executorchs_runtime_writes(builds: Path, tmp_path: Path, name: str) -> None:
    """In order, one per operator XNNPACK runs (int8-dynamic: the qd8 Convert before the linear is
    folded into it, the one before the convolution is not); every one named by the Inspector."""
    from etbuild.backends.xnnpack.format.blob import read_blob
    from etbuild.runtime.format.pte import read_program, segment_bytes

    data = (builds / name / f"{name}.pte").read_bytes()
    program, header = read_program(data)
    segment = program.execution_plan[0].delegates[0].processed.index
    graph = read_blob(segment_bytes(data, program, header, segment)).graph
    predicted = operator_names(graph)
    assert predicted is not None and all(x.debug_handle > 0 for x in graph.xnodes)
    dump = _device_etdump(builds / name, tmp_path)
    written = [e.profile_event.delegate_debug_id_str for run in ed.read_etdump(dump.read_bytes()).run_data
               if run.name == "Execute" for e in run.events
               if e.profile_event and e.profile_event.delegate_debug_id_str]
    assert [p for p in predicted if p] * 2 == written  # two calls
    events = _node_events(dump, builds / name / "etrecord.bin")
    assert set(events) == set(written) and all(paths and ops for paths, ops in events.values())


def test_a_delegate_with_a_node_of_unmeasured_kind_gets_only_our_runtimes_ids() -> None:
    """No ExecuTorch ids when one node's operator type is not known (they could be counted wrong);
    a fused call adds its name to the node it was fused into."""
    from etbuild.backends.xnnpack.aot.builder import GraphBuilder
    from etbuild.backends.xnnpack.aot.debug import debug_map

    b = GraphBuilder()
    x = b.tensor([1, 4])
    b.handle = 1
    negated = b.unary("Negate", x, [1, 4])
    b.handle = 2
    out = b.unary("Sigmoid", negated, [1, 4])
    graph = b.finish([x], [out])
    calls = [n for n in torch.fx.symbolic_trace(lambda a: torch.sigmoid(-a)).graph.nodes if n.op == "call_function"]
    assert operator_names(graph) is None
    assert debug_map(graph, calls, {id(graph.xnodes[1]): [1]}) == {
        "node 0 (Negate)": (calls[0].name,), "node 1 (Sigmoid)": (calls[1].name, calls[0].name)}
