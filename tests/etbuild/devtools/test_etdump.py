"""ETDumps both ways: `etbuild profile --etdump` (ExecuTorch's reader and Inspector read ours) and
`etbuild profile --from` (ExecuTorch's runtime's ETDump of our `.pte` shown as our own profile),
and bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.cli import main
from etbuild.devtools import etdump_format as ed
from etbuild.devtools.instrument import generated_inputs
from etbuild.errors import InvalidETDump
from etbuild.pipeline import compile_module
from etbuild.recipe.config import BackendConfig, FrozenMapping
from etbuild.runtime import Program
from etbuild.tools.etdump_profile import from_etdump, to_etdump
from etbuild.tools.profile import INSTRUCTION, profile_method
from tests.conftest import requires_executorch


@pytest.fixture(scope="module")
def xnnpack_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A conv net with an XNNPACK delegate in the middle: delegated nodes and a portable kernel."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
    path = tmp_path_factory.mktemp("xnn") / "xnn.pte"
    path.write_bytes(compile_module(model, (torch.randn(1, 3, 16, 16),),
                                    backends=(BackendConfig("xnnpack", FrozenMapping({})),)).pte)
    return path


def _ours(pte: Path, calls: int = 3):
    method = Program.load(pte).load_method("forward")
    profile = profile_method(method, generated_inputs(method), calls)
    return profile, method.plan


def test_our_etdump_reads_back_as_the_same_profile(small_mlp_pte: Path) -> None:
    profile, plan = _ours(small_mlp_pte)
    data = ed.write_etdump(to_etdump(profile, plan))
    assert data[8:12] == b"ED00" and int.from_bytes(data[:4], "little") == len(data) - 4
    back = from_etdump(ed.read_etdump(data, "x.etdump"), plan, "x.etdump")
    assert back.calls == 3 and len(back.call_spans) == 3
    mine = {(e.instruction, e.node): (e.name, e.runs) for e in profile.entries}
    assert {(e.instruction, e.node): (e.name, e.runs) for e in back.entries} == mine
    for a, b in zip(sorted(profile.entries, key=lambda e: e.instruction), sorted(back.entries,
                                                                                  key=lambda e: e.instruction)):
        assert b.median_us == pytest.approx(a.median_us, abs=0.01)  # ns resolution
        assert (b.inputs, b.outputs) == (a.inputs, a.outputs)


def test_profile_command_writes_the_etdump(xnnpack_pte: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "ours.etdump"
    assert main(["profile", str(xnnpack_pte), "--calls", "2", "--etdump", str(out)]) == 0
    ours = capsys.readouterr().out
    dump = ed.read_etdump(out.read_bytes())
    assert [r.name for r in dump.run_data] == ["Execute", "Execute"]
    names = [e.profile_event.name for e in dump.run_data[0].events]
    assert names[0] == "Method::execute" and names[-1] == "DELEGATE_CALL"  # nodes end before their delegate call
    nodes = [e.profile_event.delegate_debug_id_str for e in dump.run_data[0].events if e.profile_event.name is None]
    assert nodes and all(n.startswith("node ") for n in nodes)
    assert main(["profile", str(xnnpack_pte), "--from", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "XnnpackBackend:Conv2d" in shown and "XnnpackBackend:Conv2d" in ours


@requires_executorch
def test_executorch_reads_our_etdump_and_its_inspector_lists_it(xnnpack_pte: Path, tmp_path: Path) -> None:
    from executorch.devtools import Inspector
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    profile, plan = _ours(xnnpack_pte, 2)
    path = tmp_path / "ours.etdump"
    path.write_bytes(ed.write_etdump(to_etdump(profile, plan)))
    theirs = deserialize_from_etdump_flatcc(path.read_bytes())
    assert len(theirs.run_data) == 2 and theirs.run_data[0].events[0].profile_event.name == "Method::execute"
    frame = Inspector(etdump_path=str(path)).to_dataframe()
    node_names = {e.name for e in profile.entries if e.node != INSTRUCTION}
    assert set(frame["event_name"]) == {"Method::execute", "DELEGATE_CALL"} | node_names
    assert all(len(raw) == 2 for raw in frame["raw"])  # one time per call


@requires_executorch
@pytest.mark.parametrize("delegated", [False, True], ids=["portable", "xnnpack"])
def test_from_shows_executorchs_etdump_of_our_program(small_mlp_pte, xnnpack_pte, tmp_path, capsys, delegated):
    from etbuild.verify.oracle_etdump import executorch_etdump

    pte = xnnpack_pte if delegated else small_mlp_pte
    method = Program.load(pte).load_method("forward")
    dump = executorch_etdump(pte, generated_inputs(method), tmp_path / "device.etdump", calls=3)
    trace = tmp_path / "trace.json"
    assert main(["profile", str(pte), "--from", str(dump), "--trace", str(trace)]) == 0
    shown = capsys.readouterr().out
    assert main(["profile", str(pte), "--calls", "3"]) == 0
    ours = capsys.readouterr().out
    view = from_etdump(ed.read_etdump(dump.read_bytes()), method.plan, str(dump))
    assert view.calls == 3 and trace.stat().st_size > 0
    kernels = {e.name for e in view.entries if e.node == INSTRUCTION}
    mine = {e.name for e in _ours(pte, 1)[0].entries if e.node == INSTRUCTION}
    assert kernels == mine  # the same instructions, by the same names
    for name in mine:
        assert name in shown and name in ours
    if delegated:  # XNNPACK's own operator names, under our backend's group
        assert any(e.node != INSTRUCTION and e.operator.startswith("XnnpackBackend:") for e in view.entries)


@requires_executorch
def test_an_etdump_of_another_program_is_refused(small_mlp_pte, xnnpack_pte, tmp_path, capsys) -> None:
    from etbuild.verify.oracle_etdump import executorch_etdump

    method = Program.load(xnnpack_pte).load_method("forward")
    dump = executorch_etdump(xnnpack_pte, generated_inputs(method), tmp_path / "device.etdump", calls=1)
    assert main(["profile", str(small_mlp_pte), "--from", str(dump)]) == 5
    err = capsys.readouterr().err
    assert "device.etdump: an event" in err and "the ETDump is not of this program's method 'forward'" in err


def _one_event(**fields) -> bytes:
    event = ed.ProfileEvent(**{"name": "OPERATOR_CALL", "chain_index": 0, "start_time": 1, "end_time": 2, **fields})
    return ed.write_etdump(ed.ETDump(0, [ed.RunData("Execute", -1, [], [ed.Event(event)])]))


@pytest.mark.parametrize(("fields", "problem"), [
    ({"instruction_id": 99}, "instruction 99 of chain 0, but the method has one chain of 5 instructions"),
    ({"instruction_id": 0, "chain_index": 1}, "instruction 0 of chain 1"),
    ({"instruction_id": 0, "name": "DELEGATE_CALL"}, "DELEGATE_CALL at instruction 0, which is aten::addmm.out"),
    ({"instruction_id": 1, "name": "native_call_addmm.out"}, "kernel addmm.out at instruction 1, which is aten::relu"),
    ({"instruction_id": 0, "name": None, "delegate_debug_id_int": 3}, "a delegate node at instruction 0"),
])
def test_events_that_do_not_fit_are_refused(small_mlp_pte, fields, problem) -> None:
    plan = Program.load(small_mlp_pte).plan("forward")
    assert len(plan.chains[0].instructions) == 5
    with pytest.raises(InvalidETDump, match="^x.etdump: an event .* records " + problem.replace("(", r"\(")):
        from_etdump(ed.read_etdump(_one_event(**fields)), plan, "x.etdump")


def test_a_matching_event_is_read(small_mlp_pte) -> None:
    plan = Program.load(small_mlp_pte).plan("forward")
    view = from_etdump(ed.read_etdump(_one_event(instruction_id=0)), plan, "x")
    assert [(e.instruction, e.name) for e in view.entries] == [(0, "aten::addmm.out")]


@pytest.mark.parametrize("cut", [0, 3, 11, 40, -9])
def test_truncated_etdump_is_a_typed_error(small_mlp_pte, cut: int) -> None:
    profile, plan = _ours(small_mlp_pte, 1)
    data = ed.write_etdump(to_etdump(profile, plan))
    with pytest.raises(InvalidETDump, match=r"^x\.etdump: "):
        ed.read_etdump(data[:cut], "x.etdump")


def test_foreign_file_is_a_typed_error(small_mlp_pte, tmp_path, capsys) -> None:
    expected = r"x\.etdump: not an ETDump: bytes 4-7 and 8-11 are b'ET12' and b'eh00'; expected b'ED00'"
    with pytest.raises(InvalidETDump, match=expected):
        ed.read_etdump(small_mlp_pte.read_bytes(), "x.etdump")
    assert main(["profile", str(small_mlp_pte), "--from", str(small_mlp_pte)]) == 5
    assert np.char.startswith(capsys.readouterr().err, "error: ")


def test_intermediates_are_debug_events_with_their_bytes(small_mlp_pte, tmp_path) -> None:
    from etbuild.devtools.etdump_debug import intermediate_run

    method = Program.load(small_mlp_pte).load_method("forward")
    x = generated_inputs(method)
    run, buffer = intermediate_run(method, x)
    events = [e.debug_event for e in run.events]
    assert [e.instruction_id for e in events] == [0, 1, 2, 3, 4]
    last = events[-1].debug_entry.tensor
    assert (last.scalar_type, last.sizes, last.strides, last.offset % 64) == (6, [2, 4], [4, 1], 0)
    got = np.frombuffer(buffer, np.float32, count=8, offset=last.offset).reshape(2, 4)
    np.testing.assert_array_equal(got, Program.load(small_mlp_pte).load_method("forward")(*x)[0])


@requires_executorch
def test_inspector_reads_our_intermediates(small_mlp, small_mlp_pte, tmp_path) -> None:
    from executorch.devtools import Inspector

    out = tmp_path / "ours.etdump"
    assert main(["profile", str(small_mlp_pte), "--calls", "2", "--etdump", str(out), "--intermediates",
                 "--seed", "3"]) == 0
    inspector = Inspector(etdump_path=str(out), debug_buffer_path=f"{out}.debug")
    debug = {e._instruction_id: e.debug_data for b in inspector.event_blocks for e in b.events if e.debug_data}
    assert sorted(debug) == [0, 1, 2, 3, 4]
    model, _ = small_mlp
    x = generated_inputs(Program.load(small_mlp_pte).load_method("forward"), 3)[0]
    with torch.no_grad():  # mlp is Linear, ReLU, Linear, ReLU, Linear: one instruction each
        hidden = model[1](model[0](torch.from_numpy(x)))
        final = model(torch.from_numpy(x))
    torch.testing.assert_close(debug[1][0], hidden, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(debug[4][0], final, rtol=1e-5, atol=1e-6)


@requires_executorch
def test_from_names_the_users_modules(tmp_path, capsys) -> None:
    """With the build's debug map beside the .pte, each kernel call's row names its module path."""
    import io

    from etbuild.build.driver import build
    from etbuild.verify.oracle_etdump import executorch_etdump

    recipe = tmp_path / "enc.yaml"
    recipe.write_text("name: enc\nmodel:\n  factory: etbuild.zoo:transformer_encoder\n"
                      "  kwargs: {layers: 2, d_model: 32, heads: 2, ffn: 64}\n"
                      "  inputs: [{shape: [1, 8, 32], dtype: float32}]\nverify: {atol: 1.0e-4}\n")
    assert build([recipe], tmp_path / "build", stream=io.StringIO()).exit_code == 0
    pte = tmp_path / "build" / "enc" / "enc.pte"
    dump = executorch_etdump(pte, generated_inputs(Program.load(pte).load_method("forward")),
                             tmp_path / "device.etdump", calls=2)
    assert main(["profile", str(pte), "--from", str(dump), "--top", "200"]) == 0
    rows = capsys.readouterr().out.split("instruction operator", 1)[1]
    assert "(0.attention" in rows and "(1.attention" in rows  # the encoder's layers: a Sequential


@pytest.mark.parametrize(("flags", "message"), [
    (["--from", "a.etdump", "--etdump", "b.etdump"], "give one of them"),
    (["--intermediates"], "give --etdump out.etdump too"),
])
def test_flags_that_do_not_go_together(small_mlp_pte, capsys, flags, message) -> None:
    assert main(["profile", str(small_mlp_pte), *flags]) == 2
    assert message in capsys.readouterr().err
