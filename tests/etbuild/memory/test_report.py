"""The memory report (memory.json), its text table and the SVG picture of a plan."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from etbuild.memory.hierarchy import Level, Rule, place
from etbuild.memory.lifetimes import TensorLife
from etbuild.memory.report import format_memory_table, memory_report
from etbuild.memory.svg import memory_svg

CHAIN = [
    TensorLife(0, 100_352, -1, 0), TensorLife(5, 65_536, 0, 1), TensorLife(6, 65_536, 1, 2),
    TensorLife(11, 32_768, 2, 3), TensorLife(12, 32_768, 3, 4), TensorLife(17, 1_280, 4, 5),
]
# Greedy needs 224 bytes where 208 are live at once (see memory/test_memory.py).
FRAGMENTED = [
    TensorLife(0, 64, 2, 4), TensorLife(1, 32, 2, 4), TensorLife(2, 64, 0, 2), TensorLife(3, 48, 0, 2),
    TensorLife(4, 80, 0, 1),
]
LEVELS = [Level("sram", 131_072, 16), Level("dram", None, 64)]
SVG = "{http://www.w3.org/2000/svg}"


def test_memory_report_of_two_levels():
    plan = place(CHAIN, LEVELS, [], "greedy")
    assert memory_report(plan, CHAIN, LEVELS, {"values": 18, "kernel_scratch": 0}) == {
        "planner": "greedy",
        "levels": [
            {
                "name": "sram", "memory_id": 1, "capacity": 131_072, "alignment": 16, "planned_bytes": 100_352,
                "lower_bound": 100_352, "ratio": 1.0, "unshared_bytes": 232_704, "free_bytes": 30_720,
                "tensor_count": 5,
            },
            {
                "name": "dram", "memory_id": 2, "capacity": None, "alignment": 64, "planned_bytes": 65_536,
                "lower_bound": 65_536, "ratio": 1.0, "unshared_bytes": 65_536, "free_bytes": None,
                "tensor_count": 1,
            },
        ],
        "runtime_allocations": {"values": 18, "kernel_scratch": 0},
        "totals": {
            "planned_bytes": 165_888, "lower_bound": 165_888, "ratio": 1.0, "unshared_bytes": 298_240,
            "tensor_count": 6,
        },
    }


def test_ratio_above_the_bound_and_an_empty_level():
    levels = [Level("dram", None, 16), Level("flash", None, 16)]
    report = memory_report(place(FRAGMENTED, levels, [], "greedy"), FRAGMENTED, levels, {})
    assert [(e["planned_bytes"], e["lower_bound"], e["ratio"]) for e in report["levels"]] == [
        (224, 208, 1.0769), (0, 0, None),
    ]
    assert report["totals"]["ratio"] == 1.0769


def test_memory_table():
    plan = place(CHAIN, LEVELS, [], "greedy")
    table = format_memory_table(memory_report(plan, CHAIN, LEVELS, {"values": 18, "kernel_scratch": 0}))
    assert table == (
        "planner: greedy\n"
        "level  id  capacity  planned  lower bound   ratio    free  unshared  tensors\n"
        "-----  --  --------  -------  -----------  ------  ------  --------  -------\n"
        "sram    1   131,072  100,352      100,352  1.0000  30,720   232,704        5\n"
        "dram    2         -   65,536       65,536  1.0000       -    65,536        1\n"
        "-----  --  --------  -------  -----------  ------  ------  --------  -------\n"
        "total   -         -  165,888      165,888  1.0000       -   298,240        6\n"
        "runtime allocations: values 18, kernel_scratch 0\n"
    )


def test_memory_table_without_runtime_allocations():
    levels = [Level("dram", None, 16)]
    table = format_memory_table(memory_report(place(FRAGMENTED, levels, [], "best"), FRAGMENTED, levels, {}))
    assert table.splitlines()[3] == "dram    1         -      208          208  1.0000     -       288        5"
    assert table.endswith("runtime allocations: none\n")


def _svg(title: str = "chain: sram + dram") -> str:
    plan = place(CHAIN, LEVELS, [Rule("dram", module="encoder.fc1")], "greedy", {5: "encoder.fc1"})
    return memory_svg(CHAIN, plan.placements, ["sram", "dram"], plan.level_bytes, title, {5: "encoder.fc1"})


def test_svg_has_one_rectangle_per_tensor_with_a_tooltip():
    root = ET.fromstring(_svg())
    assert root.tag == f"{SVG}svg" and root.get("width") == "900"
    tips = [r.find(f"{SVG}title").text for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(tips) == len(CHAIN)
    assert tips[0] == "value 0: 100,352 bytes at offset 0 in sram, instructions -1..0"
    assert tips[-1] == "value 5: 65,536 bytes at offset 0 in dram, instructions 0..1, encoder.fc1"


def test_svg_marks_each_level_peak_and_labels_axes_and_legend():
    root = ET.fromstring(_svg())
    texts = [t.text for t in root.iter(f"{SVG}text")]
    dashed = [line for line in root.iter(f"{SVG}line") if line.get("stroke-dasharray")]
    assert len(dashed) == 2
    assert "peak: 100,352 bytes live before the first instruction" in texts
    assert "peak: 65,536 bytes live at instruction 0" in texts
    assert texts.count("instruction") == 2 and texts.count("byte offset") == 2
    assert "sram (memory 1): 100,352 bytes planned, 5 tensors" in texts
    assert "dram: 1 tensor, 64 KiB of tensor data" in texts
    assert "chain: sram + dram" in texts


def test_svg_is_deterministic_and_escapes_text():
    assert _svg() == _svg()
    root = ET.fromstring(_svg("a <b> & c"))
    assert "a <b> & c" in [t.text for t in root.iter(f"{SVG}text")]
