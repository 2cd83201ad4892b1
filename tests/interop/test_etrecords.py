"""Every recipe of `recipes/`: ExecuTorch's runtime runs our `.pte` with its ETDump on, and its
Inspector, given our `etrecord.bin`, names each executed instruction with the modules our
`--from` view names; every instruction a graph call made names one; inside an XNNPACK delegate
every node event ExecuTorch's runtime writes names the modules of the calls it lowers, as `--from`
does.

Each recipe builds in its own temporary tree (slow: `-m slow`), except `mlp`. Skipped without
the executorch oracle. ExecuTorch 1.5.1's Inspector reads only a method named `forward`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from etbuild.build.driver import build
from etbuild.devtools.etdump_profile import etrecord_modules, etrecord_node_modules
from etbuild.devtools.etrecord_format import ROOT
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.runtime.format import program as fb
from etbuild.tools import instrument
from etbuild.tools.profile import generated_inputs
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

RECIPES = [p for p in discover_recipes(Path(__file__).resolve().parents[2] / "recipes")
           if "forward" in {m.name for m in load_recipe(p).model.methods}]
FAST = {"mlp"}


def _made_by_no_call(plan: fb.ExecutionPlan) -> set[int]:
    """Instructions no call of the graph makes: buffer write-backs (`aten::copy_`) and the instructions of
    `torch.cond` branches (subgraphs, which the Inspector does not walk)."""
    instructions = plan.chains[0].instructions
    out = {k for k, ins in enumerate(instructions) if instrument.label(plan, ins) == "aten::copy_"}
    for j, ins in enumerate(instructions):
        if isinstance(ins.instr_args, fb.JumpFalseCall):
            out |= set(range(j + 1, ins.instr_args.destination_instruction))
    return out


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
    assert events and {k: p for k, p in events.items() if p} == {
        k: {"" if p == ROOT else p for p in ours[k]} for k in events if ours.get(k)}
    assert {k for k, p in events.items() if not p} <= _made_by_no_call(plan)
    # inside a delegate: every node XNNPACK runs names the modules of the calls it lowers, as --from does
    nodes = {(e._instruction_id, str(e.delegate_debug_identifier)): _innermost(e)
             for e in executed if e.is_delegated_op}
    by_node = etrecord_node_modules(etrecord, plan)
    assert all(nodes.values())
    assert nodes == {key: {"" if p == ROOT else p for p in by_node[key]} for key in nodes}


def _innermost(event: Any) -> set[str]:
    """The innermost module path of each call the Inspector names for an event."""
    return {list(s.values())[-1][0] for s in event.module_hierarchy.values() if s}
