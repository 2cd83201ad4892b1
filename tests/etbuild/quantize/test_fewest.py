"""etbuild.quantize.fallback.fewest: the fewest first candidates a judge passes, the search both fallbacks run."""

from __future__ import annotations

from collections.abc import Sequence

from etbuild.quantize.fallback.fewest import Judge, fewest


def _counting(needed: int) -> tuple[Judge[str, int], list[int]]:
    """A judge that passes once `needed` candidates are applied, and the counts it was asked for."""
    asked: list[int] = []

    def measure(chosen: Sequence[str]) -> int:
        asked.append(len(chosen))
        return len(chosen)

    return Judge(measure, lambda count: count >= needed), asked


ORDER = [f"layer{i}" for i in range(10)]


def test_doubling_goes_up_then_halves_back_to_the_fewest_that_pass() -> None:
    judge, asked = _counting(5)
    assert fewest(ORDER, judge, start=1) == (5, 5)
    assert asked == [1, 2, 4, 8, 6, 5]


def test_one_at_a_time_stops_at_the_first_that_passes() -> None:
    judge, asked = _counting(3)
    assert fewest(ORDER, judge, doubling=False) == (3, 3)
    assert asked == [0, 1, 2, 3]


def test_a_start_that_passes_is_kept_and_none_passing_gives_them_all() -> None:
    judge, asked = _counting(2)
    assert fewest(ORDER, judge, start=4) == (4, 4) and asked == [4]
    judge, asked = _counting(11)
    assert fewest(ORDER, judge, start=1) == (10, 10)
    assert asked == [1, 2, 4, 8, 10]


def test_the_judge_sees_the_first_candidates_of_the_order() -> None:
    seen: list[tuple[str, ...]] = []

    def measure(chosen: Sequence[str]) -> bool:
        seen.append(tuple(chosen))
        return "layer2" in chosen

    assert fewest(ORDER, Judge(measure, bool), start=1) == (3, True)
    assert seen == [("layer0",), ("layer0", "layer1"), ("layer0", "layer1", "layer2", "layer3"),
                    ("layer0", "layer1", "layer2")]
