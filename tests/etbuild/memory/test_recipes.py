"""Memory hierarchies end to end: recipes with SRAM and DRAM, the overflow message, caller
buffers by level name, the reports, and results that do not depend on the planner."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.build.driver import build
from etbuild.errors import MethodInputError
from etbuild.memory.measure import memory_tables
from etbuild.memory.planners import PLANNERS
from etbuild.model import example_inputs
from etbuild.pipeline import compile_module
from etbuild.recipe import MemoryConfig, load_recipe
from etbuild.runtime import Program

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


@pytest.fixture(scope="module")
def cnn_sram(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("build")
    result = build([RECIPES / "cnn-sram.yaml"], root, stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    return root / "cnn-sram"


def test_sram_level_forces_spills_to_dram(cnn_sram):
    plan = json.loads((cnn_sram / "plan.json").read_text())["methods"][0]
    sram, dram = plan["levels"]
    assert (sram["name"], dram["name"]) == ("sram", "dram")
    assert 0 < sram["planned_bytes"] <= 256 * 1024 and dram["planned_bytes"] > 0
    used = {t["memory_id"] for t in plan["tensors"]}
    assert used == {1, 2}
    program = Program.load(cnn_sram / "cnn-sram.pte").plan("forward")
    assert program.non_const_buffer_sizes == [0, sram["planned_bytes"], dram["planned_bytes"]]


def test_memory_report_and_drawing(cnn_sram):
    report = json.loads((cnn_sram / "memory.json").read_text())["methods"]["forward"]
    assert [lv["name"] for lv in report["levels"]] == ["sram", "dram"]
    for level in report["levels"]:
        assert level["planned_bytes"] >= level["lower_bound"] > 0 and level["tensor_count"] > 0
    assert report["runtime_allocations"]["values"] > report["runtime_allocations"]["tensors"] > 0
    svg = (cnn_sram / "memory.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") > report["totals"]["tensor_count"]
    table = memory_tables(cnn_sram / "cnn-sram.pte")
    assert "sram    1" in table and "dram    2" in table


def test_caller_buffers_by_level_name(cnn_sram):
    recipe = load_recipe(RECIPES / "cnn-sram.yaml")
    x = example_inputs(recipe)[0].numpy()
    program = Program.load(cnn_sram / "cnn-sram.pte")
    sizes = program.plan("forward").non_const_buffer_sizes
    sram = np.zeros(256 * 1024, np.uint8)
    method = program.load_method(buffers={"sram": sram})
    np.testing.assert_array_equal(method(x)[0], program.load_method()(x)[0])
    assert sram[: sizes[1]].any()
    with pytest.raises(MethodInputError) as err:
        program.load_method(buffers={"sram": np.zeros(1024, np.uint8)})
    assert str(err.value) == f"buffer for sram holds 1024 bytes; the plan needs {sizes[1]}"
    with pytest.raises(MethodInputError, match="no memory level 'flash'; levels: sram, dram"):
        program.load_method(buffers={"flash": sram})


def test_overflow_names_the_level_bytes_and_largest_live_tensors(tmp_path):
    result = build([RECIPES / "errors" / "cnn-sram-overflow.yaml"], tmp_path, stream=io.StringIO())
    assert result.failed == {"plan:cnn-sram-overflow": (
        "memory level 'dram' needs at least 884,736 bytes but holds 524,288, and no slower level follows to "
        "take tensors: the largest tensors live at its peak (instruction 6, 884,736 bytes live) are value 24 "
        "(442,368 bytes, instructions 5..6, 2.body.0.0), value 25 (442,368 bytes, instructions 6..7, 2.body.0.2)"
    )}


class Branchy(torch.nn.Module):
    def forward(self, x):
        a, b = torch.relu(x), torch.sigmoid(x)
        c = a * b + x
        return torch.cat([c.tanh(), a - b], 1).sum(1, keepdim=True) * c


@pytest.mark.parametrize("planner", sorted(PLANNERS))
def test_results_do_not_depend_on_the_planner(planner):
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    reference = Program.from_bytes(compile_module(Branchy(), (x,)).pte).load_method()(x.numpy())[0]
    levels = MemoryConfig(planner=planner)
    compiled = compile_module(Branchy(), (x,), levels)
    np.testing.assert_array_equal(Program.from_bytes(compiled.pte).load_method()(x.numpy())[0], reference)
