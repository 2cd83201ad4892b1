"""etbuild.release.budgets: the SRAM and flash budgets of a microcontroller product, read from its memory.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from etbuild.errors import RecipeError, ReleaseError
from etbuild.release.budgets import check_budgets, figures, sram_figure
from etbuild.release.config import Budget, load_release
from tests.etbuild.release.support import TWO

NPU = {"method": "forward", "delegate": 0, "backend": "ethos-u", "fast_bytes": 17552, "read_only_bytes": 36832,
       "command_bytes": 1472, "weight_bytes": 35360}


def memory(cpu: dict[str, int], delegates: list[dict[str, object]]) -> dict[str, object]:
    levels = {m: {"levels": [{"name": "sram", "planned_bytes": b}, {"name": "dram", "planned_bytes": 0}]}
              for m, b in cpu.items()}
    return {"methods": levels, **({"delegates": delegates} if delegates else {})}


def test_the_sram_peak_is_the_largest_methods_arenas_and_the_largest_delegate() -> None:
    both = memory({"forward": 2000, "other": 3000}, [NPU, {**NPU, "delegate": 1, "fast_bytes": 100}])
    assert sram_figure(both) == (20552, "CPU arenas in level sram 3,000 + ethos-u delegate 0 of method forward 17,552")
    assert sram_figure(memory({"forward": 2000}, [])) == (2000, "CPU arenas in level sram 2,000")


def product_dist(out: Path, pte: Path, name: str, report: dict[str, object]) -> None:
    folder = out / "products" / name
    folder.mkdir(parents=True)
    shutil.copyfile(pte, folder / f"{name}.pte")
    (folder / "memory.json").write_text(json.dumps(report))


def test_sram_and_flash_over_budget_name_product_key_numbers_and_parts(release_file: Path, small_mlp_pte: Path,
                                                                        tmp_path: Path) -> None:
    release_file.write_text(TWO.replace("latency_ms: 1.5", "sram_bytes: 16KiB, flash_bytes: 1KiB")
                            .replace("pte_bytes: 2KiB, ", ""))
    release = load_release(release_file)
    assert release.product("tiny-a").budget == Budget(runtime_bytes=3000, sram_bytes=16384, flash_bytes=1024)
    out = tmp_path / "dist"
    for name in ("tiny-a", "tiny-b"):
        product_dist(out, small_mlp_pte, name, memory({"forward": 2000}, [NPU]))
    size = small_mlp_pte.stat().st_size
    latency = {p: {"all": {"median_ms": 1.0}} for p in ("tiny-a", "tiny-b")}
    with pytest.raises(ReleaseError) as err:
        check_budgets(release, out, {"all": 100}, latency)
    assert str(err.value) == (
        "release pair-2.0.0: over budget: product tiny-a: sram_bytes 19,552 > budget 16,384 (CPU arenas in level "
        "sram 2,000 + ethos-u delegate 0 of method forward 17,552); product tiny-a: flash_bytes "
        f"{size:,} > budget 1,024 (tiny-a.pte {size:,}, of which NPU command streams and weights 36,832)")
    assert figures(out, release.product("tiny-b"))["flash_bytes"] == size
    (out / "products" / "tiny-a" / "memory.json").write_text(json.dumps(memory({"forward": 16384}, [])))
    release_file.write_text(TWO.replace("latency_ms: 1.5", f"sram_bytes: 16KiB, flash_bytes: {size}")
                            .replace("pte_bytes: 2KiB, ", ""))
    check_budgets(load_release(release_file), out, {"all": 100}, latency)  # both at their limits: within


def test_simulation_data_is_drop_or_keep(release_file: Path) -> None:
    release_file.write_text(TWO.replace("    budget:", "    simulation_data: keep\n    budget:"))
    assert load_release(release_file).product("tiny-a").keep_simulation
    assert not load_release(release_file).product("tiny-b").keep_simulation  # drop by default
    release_file.write_text(TWO.replace("    budget:", "    simulation_data: kept\n    budget:"))
    with pytest.raises(RecipeError, match=r"products\[0\]\.simulation_data: expected drop \(ship the \.pte"):
        load_release(release_file)
