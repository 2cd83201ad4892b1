"""Every recipe of `recipes/`: ExecuTorch's runtime runs our `.pte` with its ETDump on, and its
Inspector, given our `etrecord.bin`, names each executed instruction with the modules our
`--from` view names, and every executed instruction names one (a buffer write-back the module of
the value it copies, an instruction of a `torch.cond` branch the module calling `torch.cond`);
inside an XNNPACK delegate every node event ExecuTorch's runtime writes names the modules of the
calls it lowers, as `--from` does.

Each recipe builds in its own temporary tree (slow: `-m slow`), except `mlp`, `stateful` and
`cond`. Skipped without the executorch oracle. ExecuTorch 1.5.1's Inspector reads only a method named
`forward`: a program of other methods is read through its per-method ETRecords (`etrecord.<method>.bin`).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etbuild.build.driver import build
from etbuild.build.layout import Artifacts
from etbuild.build.stage_table import stage_calls
from etbuild.devtools import etrecord_format as er
from etbuild.devtools import instrument
from etbuild.devtools.etrecord_format import ROOT
from etbuild.devtools.instrument import generated_inputs
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.runtime.format import program as fb
from etbuild.tools.etdump_profile import etrecord_modules, etrecord_node_modules
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

RECIPE_DIR = Path(__file__).resolve().parents[2] / "recipes"
RECIPES = [p for p in discover_recipes(RECIPE_DIR)
           if "forward" in {m.name for m in load_recipe(p).model.methods}]
FAST = {"mlp", "stateful", "cond"}  # a few seconds each; the buffer write-back and cond cases


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem, marks=() if p.stem in FAST else pytest.mark.slow)
                                  for p in RECIPES])
def test_the_inspector_names_our_operators_modules(path: Path, tmp_path: Path) -> None:
    from executorch.devtools import Inspector

    from etbuild.verify.oracle_etdump import executorch_etdump

    name = load_recipe(path).name
    assert build([path], tmp_path / "build", stream=io.StringIO()).exit_code == 0
    pte, etrecord = tmp_path / "build" / name / f"{name}.pte", tmp_path / "build" / name / "etrecord.bin"
    dump = executorch_etdump(pte, generated_inputs(Program.load(pte).load_method("forward")),
                             tmp_path / "device.etdump", calls=1)
    executed = [e for b in Inspector(etdump_path=str(dump), etrecord=str(etrecord)).event_blocks
                if b.name == "Execute" for e in b.events]
    events = {e._instruction_id: _innermost(e) for e in executed if e.name in ("OPERATOR_CALL", "DELEGATE_CALL")}
    plan = Program.load(pte).plan("forward")
    ours = etrecord_modules(etrecord, plan) or {}
    assert events and all(events.values()), {k for k, p in events.items() if not p}  # every one names a module
    assert events == {k: {"" if p == ROOT else p for p in ours.get(k, [])} for k in events}
    # inside a delegate: every node XNNPACK runs names the modules of the calls it lowers, as --from does
    nodes = {(e._instruction_id, str(e.delegate_debug_identifier)): _innermost(e)
             for e in executed if e.is_delegated_op}
    by_node = etrecord_node_modules(etrecord, plan)
    assert all(nodes.values())
    assert nodes == {key: {"" if p == ROOT else p for p in by_node[key]} for key in nodes}


def _innermost(event: Any) -> set[str]:
    """The innermost module path of each call the Inspector names for an event."""
    return {list(s.values())[-1][0] for s in event.module_hierarchy.values() if s}


def test_write_backs_and_both_cond_branches_name_the_call_they_serve(tmp_path: Path) -> None:
    """A buffer write-back (`aten::copy_`) is named as the call whose value it copies (its operator and
    module); every instruction of either `torch.cond` branch as the cond call (operator `cond`, the
    module calling it: the model itself here)."""
    root = tmp_path / "build"
    assert build([RECIPE_DIR / "stateful.yaml", RECIPE_DIR / "cond.yaml"], root, stream=io.StringIO()).exit_code == 0
    pte = root / "stateful" / "stateful.pte"
    plan = Program.load(pte).plan("forward")
    events = _events(pte, generated_inputs(Program.load(pte).load_method("forward")), tmp_path / "s.etdump")
    sources = json.loads((root / "stateful" / "lowered.debug.json").read_text())["methods"]["forward"]
    copies = {k: ins.instr_args.args[1] for k, ins in enumerate(plan.chains[0].instructions)
              if instrument.label(plan, ins) == "aten::copy_"}
    graph = json.loads(er.read_etrecord(root / "stateful" / "etrecord.bin")["forward"].graph[0])
    mutations = {spec["buffer_mutation"]["arg"]["name"] for spec in graph["graph_module"]["signature"]["output_specs"]
                 if "buffer_mutation" in spec}
    assert len(copies) == 2 and {sources[str(v)]["node"] for v in copies.values()} == mutations
    for k, value in copies.items():
        source = sources[str(value)]
        assert events[k] == ({"" if source["module"] == ROOT else source["module"]},
                             [source["op"].removeprefix("aten.")])
    pte = root / "cond" / "cond.pte"
    plan = Program.load(pte).plan("forward")
    instructions = plan.chains[0].instructions
    spans = [range(j + 1, ins.instr_args.destination_instruction) for j, ins in enumerate(instructions)
             if isinstance(ins.instr_args, fb.JumpFalseCall)]
    branches = {k for span in spans for k in span if isinstance(instructions[k].instr_args, fb.KernelCall)}
    ran: dict[int, tuple[set[str], list[str]]] = {}
    for sign in (1.0, -1.0):  # x.sum() > 0 takes the true branch, < 0 the false one
        ran |= _events(pte, [np.full((1, 16), sign, np.float32)], tmp_path / f"c{sign}.etdump")
    assert branches and branches <= set(ran)
    assert all(ran[k] == ({""}, ["cond"]) for k in branches)
    ours = etrecord_modules(root / "cond" / "etrecord.bin", plan) or {}
    assert all(ours[k] == [ROOT] for k in branches)


@pytest.mark.parametrize("name", ["two-method", pytest.param("lm", marks=pytest.mark.slow)])
def test_each_method_has_an_etrecord_the_inspector_reads(name: str, tmp_path: Path) -> None:
    """A program of methods other than `forward`: given an ETDump of one method and that method's
    `etrecord.<method>.bin` (a lower stage output), ExecuTorch's Inspector names every executed
    instruction with the modules `--from` names from `etrecord.bin`."""
    recipe = load_recipe(RECIPE_DIR / f"{name}.yaml")
    root = tmp_path / "build"
    assert build([RECIPE_DIR / f"{name}.yaml"], root, stream=io.StringIO()).exit_code == 0
    pte, outputs = root / name / f"{name}.pte", stage_calls(recipe, Artifacts.of(recipe, root))["lower"].outputs
    for method in (m.name for m in recipe.model.methods):
        etrecord = root / name / f"etrecord.{method}.bin"
        assert etrecord in outputs and etrecord.exists()
        events = _events(pte, generated_inputs(Program.load(pte).load_method(method)), tmp_path / f"{method}.etdump",
                         method, etrecord)
        ours = etrecord_modules(root / name / "etrecord.bin", Program.load(pte).plan(method)) or {}
        assert events and all(paths for paths, _ in events.values())
        assert {k: paths for k, (paths, _) in events.items()} == {
            k: {"" if p == ROOT else p for p in ours.get(k, [])} for k in events}


def _events(pte: Path, inputs: list[Any], out: Path, method: str = "forward",
            etrecord: Path | None = None) -> dict[int, tuple[set[str], list[str]]]:
    """Instruction → (innermost module paths, operator types) of the Inspector's instruction events for
    one call of `method` (with `etrecord`, else the build's `etrecord.bin`)."""
    from executorch.devtools import Inspector

    from etbuild.verify.oracle_etdump import executorch_etdump

    dump = executorch_etdump(pte, inputs, out, calls=1, method=method)
    inspector = Inspector(etdump_path=str(dump), etrecord=str(etrecord or pte.parent / "etrecord.bin"))
    return {e._instruction_id: (_innermost(e), list(e.op_types)) for b in inspector.event_blocks
            if b.name == "Execute" for e in b.events if e.name in ("OPERATOR_CALL", "DELEGATE_CALL")}
