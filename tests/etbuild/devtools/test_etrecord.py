"""The build's ETRecord: ExecuTorch's Inspector, given ExecuTorch's ETDump of our `.pte` and our
`etrecord.bin`, names each executed operator with the recipe model's module path; our `--from`
view names the same modules; bad ETRecords are typed errors naming the file."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from etbuild.build.driver import build
from etbuild.build.layout import Artifacts
from etbuild.build.stage_table import stage_calls
from etbuild.cli import main
from etbuild.devtools import etrecord_format as er
from etbuild.devtools.instrument import generated_inputs
from etbuild.errors import InvalidETRecord
from etbuild.model import build_model
from etbuild.recipe import load_recipe
from etbuild.runtime import Program
from etbuild.runtime.format import program as fb
from etbuild.tools.etdump_profile import etrecord_modules, module_paths
from tests.conftest import requires_executorch

RECIPES = Path(__file__).parents[3] / "recipes"
PORTABLE, DELEGATED = "mlp", "mlp-xnnpack"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A portable and an XNNPACK-delegated recipe, built."""
    root = tmp_path_factory.mktemp("etrecord") / "build"
    paths = [RECIPES / f"{name}.yaml" for name in (PORTABLE, DELEGATED)]
    assert build(paths, root, stream=io.StringIO()).exit_code == 0
    return root


def _pte(built: Path, name: str) -> Path:
    return built / name / f"{name}.pte"


def _device_etdump(built: Path, name: str, tmp_path: Path) -> Path:
    from etbuild.verify.oracle_etdump import executorch_etdump

    pte = _pte(built, name)
    return executorch_etdump(pte, generated_inputs(Program.load(pte).load_method("forward")),
                             tmp_path / f"{name}.etdump", calls=2)


def _inspector_modules(etdump: Path, etrecord: Path) -> dict[int, tuple[str, set[str], list[str]]]:
    """Instruction → (event name, innermost module paths, operator types) of the Inspector's instruction events."""
    from executorch.devtools import Inspector

    inspector = Inspector(etdump_path=str(etdump), etrecord=str(etrecord))
    out = {}
    for block in inspector.event_blocks:
        for e in block.events:
            if block.name == "Execute" and e.name in ("OPERATOR_CALL", "DELEGATE_CALL"):
                paths = {list(stack.values())[-1][0] for stack in e.module_hierarchy.values() if stack}
                out[e._instruction_id] = (e.name, paths, list(e.op_types))
    return out


def test_the_lower_stage_writes_the_etrecord_as_its_output(built: Path) -> None:
    recipe = load_recipe(RECIPES / f"{PORTABLE}.yaml")
    calls = stage_calls(recipe, Artifacts.of(recipe, built))
    assert built / PORTABLE / "etrecord.bin" in calls["lower"].outputs  # doit's targets: incremental builds stay right
    names = zipfile.ZipFile(built / PORTABLE / "etrecord.bin").namelist()
    assert names[0] == er.IDENTIFIER and f"{er.EDGE_PROGRAM}/forward" in names


@requires_executorch
@pytest.mark.parametrize("name", [PORTABLE, DELEGATED])
def test_inspector_names_every_executed_operator_with_its_module(built: Path, tmp_path: Path, name: str) -> None:
    etdump, etrecord = _device_etdump(built, name, tmp_path), built / name / "etrecord.bin"
    events = _inspector_modules(etdump, etrecord)
    plan = Program.load(_pte(built, name)).plan("forward")
    instructions = plan.chains[0].instructions
    assert sorted(events) == list(range(len(instructions)))  # every instruction ran and is listed
    model = dict(build_model(load_recipe(RECIPES / f"{name}.yaml")).named_modules())
    for k, (event, paths, ops) in events.items():
        assert ops and paths <= set(model), (k, paths)  # operator names, and module paths of the recipe's model
        assert paths, f"instruction {k} ({event}) has no module path"
    linears = {p for p, m in model.items() if type(m).__name__ == "Linear"}
    assert linears <= set().union(*(paths for _, paths, _ in events.values()))
    ours = etrecord_modules(etrecord, plan)  # what our --from view names
    root = {er.ROOT: ""}  # the model itself: '' in the Inspector, <root> in our view
    assert ours is not None
    assert {k: {root.get(p, p) for p in v} for k, v in ours.items()} == {k: p for k, (_, p, _) in events.items()}


@requires_executorch
def test_the_etrecord_agrees_with_the_debug_map(built: Path, tmp_path: Path) -> None:
    """A kernel call's module in the Inspector is the module of the value the call writes (lowered.debug.json)."""
    events = _inspector_modules(_device_etdump(built, PORTABLE, tmp_path), built / PORTABLE / "etrecord.bin")
    plan = Program.load(_pte(built, PORTABLE)).plan("forward")
    by_value = module_paths(built / PORTABLE / "lowered.debug.json", "forward")
    for k, ins in enumerate(plan.chains[0].instructions):
        assert isinstance(ins.instr_args, fb.KernelCall)
        assert events[k][1] == {by_value[ins.instr_args.args[-1]]}


@requires_executorch
def test_from_names_modules_from_the_etrecord(built: Path, tmp_path: Path, capsys) -> None:
    etdump = _device_etdump(built, DELEGATED, tmp_path)
    assert main(["profile", str(_pte(built, DELEGATED)), "--from", str(etdump), "--top", "100"]) == 0
    shown = capsys.readouterr().out
    assert "XnnpackBackend" in shown
    etdump = _device_etdump(built, PORTABLE, tmp_path)
    assert main(["profile", str(_pte(built, PORTABLE)), "--from", str(etdump)]) == 0
    rows = capsys.readouterr().out.split("instruction operator", 1)[1]
    assert "aten::addmm.out (0)" in rows and "aten::relu.out (1)" in rows


def _copy_build(built: Path, name: str, tmp_path: Path, etrecord: bytes) -> Path:
    pte = tmp_path / f"{name}.pte"
    pte.write_bytes(_pte(built, name).read_bytes())
    (tmp_path / "etrecord.bin").write_bytes(etrecord)
    return pte


@pytest.mark.parametrize("cut", [0, 10, 100, -30, -1])
def test_a_truncated_etrecord_is_a_typed_error_naming_the_file(built: Path, tmp_path: Path, cut: int) -> None:
    data = (built / PORTABLE / "etrecord.bin").read_bytes()
    path = tmp_path / "etrecord.bin"
    path.write_bytes(data[:cut])
    with pytest.raises(InvalidETRecord, match=str(path)):
        er.read_etrecord(path)


def test_a_foreign_zip_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "etrecord.bin"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("hello.txt", "not an ETRecord")
    with pytest.raises(InvalidETRecord, match=r"etrecord.bin: not an ETRecord: no 'ETRECORD_V0' entry"):
        er.read_etrecord(path)


def test_maps_of_the_wrong_shape_are_refused(built: Path, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(built / PORTABLE / "etrecord.bin") as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            data = b'{"forward": {"0": "addmm"}}' if info.filename == er.DEBUG_HANDLE_MAP else src.read(info)
            dst.writestr(info.filename, data)
    path = tmp_path / "etrecord.bin"
    path.write_bytes(buf.getvalue())
    with pytest.raises(InvalidETRecord, match="entry 'debug_handle_map', method 'forward': instruction '0'"):
        er.read_etrecord(path)


def test_the_etrecord_of_another_program_is_refused(built: Path, tmp_path: Path, capsys) -> None:
    """The portable program's ETRecord (five instructions) beside the delegated `.pte` (one) maps instructions
    that program lacks."""
    pte = _copy_build(built, DELEGATED, tmp_path, (built / PORTABLE / "etrecord.bin").read_bytes())
    plan = Program.load(pte).plan("forward")
    with pytest.raises(InvalidETRecord, match="it is the ETRecord of another program"):
        etrecord_modules(tmp_path / "etrecord.bin", plan)


def test_profile_from_reports_a_bad_etrecord(built: Path, tmp_path: Path, capsys) -> None:
    pte = _copy_build(built, PORTABLE, tmp_path, b"PK\x03\x04 truncated")
    assert main(["profile", str(pte), "--from", str(tmp_path / "unused.etdump")]) == 5
    assert f"{tmp_path / 'etrecord.bin'}: not an ETRecord" in capsys.readouterr().err


def test_from_reads_the_etrecord_without_torch(built: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    pte = _copy_build(built, PORTABLE, tmp_path, (built / PORTABLE / "etrecord.bin").read_bytes())
    dump = tmp_path / "ours.etdump"
    script = ("import sys; sys.modules['torch'] = None\nfrom etbuild.cli import main\n"
              f"assert main(['profile', {str(pte)!r}, '--calls', '1', '--etdump', {str(dump)!r}]) == 0\n"
              f"assert main(['profile', {str(pte)!r}, '--from', {str(dump)!r}]) == 0\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "aten::addmm.out (0)" in proc.stdout.split("instruction operator", 1)[1]


@pytest.mark.parametrize(("stack", "path"), [
    ("L__self__,,torch.nn.modules.container.Sequential;L__self__0,0,torch.nn.modules.linear.Linear", "0"),
    ("L__self__,,Model", er.ROOT),
    ("L__self__,,M;L__self___layers_slice(None, 2, None)_0,layers.0,Block", "layers.0"),
    ("", ""),
])
def test_the_innermost_module_of_a_serialized_stack(stack: str, path: str) -> None:
    assert er.innermost_module(stack) == path


def test_write_backs_and_nested_cond_branches_inherit_handles() -> None:
    """Instructions no graph call makes get the handle of the call they serve: a write-back `copy_` the one
    whose value it copies; every instruction of a cond's branches, an inner cond's too (its values belong
    to no call of the graph), the outer cond call's."""
    from etbuild.devtools.etrecord import method_record
    from etbuild.devtools.etrecord_graph import SerializedGraph

    def kernel(op: int, *args: int) -> fb.Instruction:
        return fb.Instruction(fb.KernelCall(op, list(args)))

    def jump(cond: int, to: int) -> fb.Instruction:
        return fb.Instruction(fb.JumpFalseCall(cond, to))

    def move(src: int, dst: int) -> fb.Instruction:
        return fb.Instruction(fb.MoveCall(src, dst))

    instructions = [
        kernel(0, 0, 1), jump(1, 10),  # gt -> v1; outer true branch: 2..9
        jump(2, 6), kernel(1, 0, 3), move(3, 5), jump(20, 8),  # inner cond, true branch
        kernel(1, 0, 6), move(6, 5),  # inner false branch
        move(5, 7), jump(20, 12),  # the outer cond's value v7; outer false branch: 10..11
        kernel(1, 0, 8), move(8, 7),
        kernel(1, 7, 9), kernel(2, 20, 9, 20, 20),  # head(v7) -> v9; copy_(v20 <- v9)
    ]
    operators = [fb.Operator("aten::gt", "Scalar_out"), fb.Operator("aten::relu", "out"),
                 fb.Operator("aten::copy_", "")]
    plan = fb.ExecutionPlan("forward", None, [], [], [], [fb.Chain([], [], instructions)], operators, [], [0])
    graph = SerializedGraph(b"", b"", b"", b"", {"gt": 1, "cond": 2, "head": 3})
    record = method_record(plan, graph, {1: "gt", 7: "cond", 9: "head"}, [])
    assert record.handles == {0: 1, 3: 2, 6: 2, 10: 2, 12: 3, 13: 3}


def test_each_method_gets_an_etrecord_under_the_name_the_inspector_reads(tmp_path: Path) -> None:
    """`etrecord.<method>.bin` per method (that method alone, named `forward`); none for a program whose only
    method is `forward`; files of methods the program no longer has are removed."""
    records = {m: er.MethodRecord((b"{}", b"", b"", b""), {0: k + 1}, {}, {0: 1})
               for k, m in enumerate(["decode", "encode"])}
    (tmp_path / "etrecord.old.bin").write_bytes(b"stale")
    er.write_method_etrecords(tmp_path, records)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["etrecord.decode.bin", "etrecord.encode.bin"]
    for method, record in records.items():
        assert er.read_etrecord(er.method_etrecord_path(tmp_path, method)) == {"forward": record}
    er.write_method_etrecords(tmp_path, {"forward": records["decode"]})
    assert list(tmp_path.iterdir()) == []
