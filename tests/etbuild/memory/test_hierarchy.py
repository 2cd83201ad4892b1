"""Placement across memory levels: rules, spilling from fast to slow levels, overflow messages."""

from __future__ import annotations

import random

import pytest

from etbuild.errors import StageError
from etbuild.memory.hierarchy import (
    HierarchyPlan,
    InvalidHierarchy,
    Level,
    MemoryOverflow,
    Placement,
    Rule,
    place,
)
from etbuild.memory.lifetimes import TensorLife, peak_live_bytes
from etbuild.memory.planners import PLANNERS, arena_size

# An MLP-like chain: the input, then two layers' activations per block.
CHAIN = [
    TensorLife(0, 100_352, -1, 0), TensorLife(5, 65_536, 0, 1), TensorLife(6, 65_536, 1, 2),
    TensorLife(11, 32_768, 2, 3), TensorLife(12, 32_768, 3, 4), TensorLife(17, 1_280, 4, 5),
]
MODULES = {5: "encoder.fc1", 6: "encoder.fc2", 11: "decoder.fc1", 12: "decoder.fc2"}
DRAM = Level("dram", None, 16)


def _sram(capacity: int) -> Level:
    return Level("sram", capacity, 16)


def _levels(plan: HierarchyPlan) -> dict[int, int]:
    return {v: p.memory_id for v, p in plan.placements.items()}


def test_one_unbounded_level_is_the_planner_plan():
    plan = place(CHAIN, [DRAM], [], "greedy")
    offsets = PLANNERS["greedy"](CHAIN, 16)
    assert plan == HierarchyPlan(
        placements={t.value: Placement(1, offsets[t.value]) for t in CHAIN},
        level_bytes=(arena_size(CHAIN, offsets, 16),), lower_bounds=(peak_live_bytes(CHAIN, 16),),
        tensor_counts=(6,), planner="greedy",
    )


def test_a_small_sram_spills_the_smallest_tensor_that_relieves_its_peak():
    # At instruction 0, 165,888 bytes are live (values 0 and 5): moving value 5 out is enough.
    plan = place(CHAIN, [_sram(131_072), DRAM], [], "greedy")
    assert plan == HierarchyPlan(
        placements={
            0: Placement(1, 0), 5: Placement(2, 0), 6: Placement(1, 0), 11: Placement(1, 65_536),
            12: Placement(1, 0), 17: Placement(1, 32_768),
        },
        level_bytes=(100_352, 65_536), lower_bounds=(100_352, 65_536), tensor_counts=(5, 1), planner="greedy",
    )


def test_a_tiny_sram_keeps_only_what_fits():
    # No single tensor relieves instructions 0 and 1, so the largest live there go first.
    plan = place(CHAIN, [_sram(40_000), DRAM], [], "best")
    assert _levels(plan) == {0: 2, 5: 2, 6: 2, 11: 2, 12: 1, 17: 1}
    assert plan.level_bytes == (34_048, 165_888)


def test_a_rule_by_size_pins_small_tensors_to_sram():
    plan = place(CHAIN, [_sram(1_000_000), DRAM], [Rule("dram", max_bytes=40_000)], "greedy")
    assert _levels(plan) == {0: 1, 5: 1, 6: 1, 11: 2, 12: 2, 17: 2}
    assert plan.tensor_counts == (3, 3)


def test_a_rule_by_module_pattern_and_the_first_matching_rule_wins():
    rules = [Rule("dram", module="encoder.*"), Rule("sram", max_bytes=70_000), Rule("dram")]
    plan = place(CHAIN, [_sram(1_000_000), DRAM], rules, "greedy", MODULES)
    assert _levels(plan) == {0: 2, 5: 2, 6: 2, 11: 1, 12: 1, 17: 1}


def test_a_tensor_a_rule_places_never_moves():
    # Value 6 (65,536 bytes) is pinned to a 70,000-byte SRAM: value 11, live beside it, must go,
    # though it is the smaller one.
    plan = place(CHAIN, [_sram(70_000), DRAM], [Rule("sram", module="encoder.fc2")], "greedy", MODULES)
    assert _levels(plan)[6] == 1 and _levels(plan)[11] == 2
    assert plan.level_bytes[0] <= 70_000


def test_fragmentation_spills_a_tensor_from_the_top_of_the_arena():
    # The peak fits (208 bytes) but greedy needs 224: value 1, on top, goes to DRAM.
    lives = [
        TensorLife(0, 64, 2, 4), TensorLife(1, 32, 2, 4), TensorLife(2, 64, 0, 2), TensorLife(3, 48, 0, 2),
        TensorLife(4, 80, 0, 1),
    ]
    assert _levels(place(lives, [_sram(208), DRAM], [], "greedy")) == {0: 1, 1: 2, 2: 1, 3: 1, 4: 1}
    assert _levels(place(lives, [_sram(208), DRAM], [], "best")) == dict.fromkeys(range(5), 1)


def test_overflow_of_the_last_level():
    with pytest.raises(MemoryOverflow) as info:
        place(CHAIN, [_sram(131_072), Level("dram", 60_000, 16)], [], "greedy", MODULES)
    assert str(info.value) == (
        "memory level 'dram' needs at least 65,536 bytes but holds 60,000, and no slower level follows to take "
        "tensors: the largest tensors live at its peak (instruction 0, 65,536 bytes live) are "
        "value 5 (65,536 bytes, instructions 0..1, encoder.fc1)"
    )


def test_overflow_of_tensors_rules_pin_lists_the_largest_at_the_peak():
    with pytest.raises(MemoryOverflow) as info:
        place(CHAIN, [_sram(100_000), DRAM], [Rule("sram", module="encoder.*")], "best", MODULES)
    assert str(info.value) == (
        "memory level 'sram' needs at least 131,072 bytes but holds 100,000, and the 2 tensors that rules place "
        "there cannot move: the largest tensors live at its peak (instruction 1, 131,072 bytes live) are "
        "value 5 (65,536 bytes, instructions 0..1, encoder.fc1), value 6 (65,536 bytes, instructions 1..2, "
        "encoder.fc2)"
    )


def test_overflow_message_shows_three_tensors_and_counts_the_rest():
    lives = [TensorLife(v, n, -1, 2) for v, n in enumerate([50, 400, 100, 300, 200])]
    with pytest.raises(MemoryOverflow) as info:
        place(lives, [_sram(1_000)], [], "greedy")
    assert str(info.value) == (
        "memory level 'sram' needs at least 1,088 bytes but holds 1,000, and no slower level follows to take "
        "tensors: the largest tensors live at its peak (before the first instruction, 1,088 bytes live) are "
        "value 1 (400 bytes, instructions -1..2), value 3 (300 bytes, instructions -1..2), "
        "value 4 (200 bytes, instructions -1..2), and 2 more"
    )


def test_overflow_from_fragmentation_suggests_the_best_planner():
    lives = [
        TensorLife(0, 64, 2, 4), TensorLife(1, 32, 2, 4), TensorLife(2, 64, 0, 2), TensorLife(3, 48, 0, 2),
        TensorLife(4, 80, 0, 1),
    ]
    with pytest.raises(MemoryOverflow) as info:
        place(lives, [_sram(208)], [], "greedy")
    assert str(info.value) == (
        "memory level 'sram' needs 224 bytes with planner 'greedy' but holds 208, and no slower level follows "
        "to take tensors: the largest tensors live at its peak (instruction 2, 208 bytes live) are "
        "value 0 (64 bytes, instructions 2..4), value 2 (64 bytes, instructions 0..2), "
        "value 3 (48 bytes, instructions 0..2), and 1 more; planner 'best' may pack them tighter"
    )
    assert place(lives, [_sram(208)], [], "best").level_bytes == (208,)


def test_a_rule_naming_an_unknown_level():
    with pytest.raises(InvalidHierarchy) as info:
        place(CHAIN, [_sram(1_000), DRAM], [Rule("dram", max_bytes=10), Rule("sramm")], "greedy")
    assert str(info.value) == (
        "memory rule 2 names level 'sramm', which is not one of: sram, dram; perhaps you meant 'sram'?"
    )
    assert isinstance(info.value, ValueError) and isinstance(info.value, StageError)
    with pytest.raises(InvalidHierarchy, match=r"^memory rule 1 names level 'flash', which is not one of: dram$"):
        place(CHAIN, [DRAM], [Rule("flash")], "greedy")


@pytest.mark.parametrize(
    ("levels", "planner", "message"),
    [
        ([DRAM], "fastest", "unknown planner 'fastest'; planners: best, bottom_up, greedy, naive, search"),
        ([], "greedy", "a memory hierarchy needs at least one level"),
        ([DRAM, DRAM], "greedy", "memory level 'dram' is listed 2 times"),
        (
            [Level("sram", -1, 16)], "greedy",
            "memory level 'sram' has alignment 16 and capacity -1; "
            "alignment must be positive and capacity not negative",
        ),
    ],
)
def test_bad_hierarchies(levels, planner, message):
    with pytest.raises(InvalidHierarchy) as info:
        place(CHAIN, levels, [], planner)
    assert str(info.value) == message


def _random_lives(rng: random.Random, n: int) -> list[TensorLife]:
    lives = []
    for i in range(n):
        start = rng.randrange(-1, 30)
        lives.append(TensorLife(i, int(2 ** rng.uniform(4, 14)), start, start + int(2 ** rng.uniform(0, 4))))
    return lives


@pytest.mark.parametrize("planner", ["greedy", "bottom_up", "best"])
@pytest.mark.parametrize("seed", range(4))
def test_every_level_is_disjoint_aligned_and_within_capacity(planner, seed):
    rng = random.Random(seed)
    lives = _random_lives(rng, 50)
    bound = peak_live_bytes(lives, 64)
    levels = [Level("tcm", bound // 5, 64), Level("sram", bound // 3, 32), Level("dram", None, 16)]
    modules = {t.value: f"layer{t.value % 10}" for t in lives}
    rules = [Rule("sram", module="layer3"), Rule("tcm", max_bytes=64)]
    plan = place(lives, levels, rules, planner, modules)
    assert sorted(plan.placements) == [t.value for t in lives]
    for i, level in enumerate(levels):
        members = [t for t in lives if plan.placements[t.value].memory_id == i + 1]
        offsets = {t.value: plan.placements[t.value].offset for t in members}
        _assert_disjoint(members, offsets, level.alignment)
        assert plan.level_bytes[i] == arena_size(members, offsets, level.alignment)
        assert level.capacity is None or plan.level_bytes[i] <= level.capacity
        assert plan.lower_bounds[i] == peak_live_bytes(members, level.alignment) <= plan.level_bytes[i]
        assert plan.tensor_counts[i] == len(members)
    assert all(plan.placements[v].memory_id == 2 for v, m in modules.items() if m == "layer3")
    assert plan.tensor_counts[0] > 0 and plan.tensor_counts[2] > 0


def _assert_disjoint(lives: list[TensorLife], offsets: dict[int, int], alignment: int) -> None:
    for a in lives:
        assert offsets[a.value] % alignment == 0
        for b in lives:
            if a.value < b.value and a.overlaps(b):
                a0, b0 = offsets[a.value], offsets[b.value]
                assert a0 + a.nbytes <= b0 or b0 + b.nbytes <= a0, (a, b)
