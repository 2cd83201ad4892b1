"""benchmarks/runtime_sizes.py: the trimmed runtimes' table from the builds' select.json files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.support import load_script


@pytest.fixture(scope="module")
def sizes():
    return load_script("runtime_sizes")


def _select(folder: Path, name: str, nbytes: int, features: list[str]) -> None:
    (folder / name).mkdir(parents=True)
    report = {"operators": {"aten::addmm.out": {}, "aten::relu.out": {}}, "runtime_features": features,
              "runtime_bytes": nbytes, "runtime_zip_bytes": nbytes // 2, "runtime_fraction": nbytes / 800_000,
              "full_runtime_bytes": 800_000}
    (folder / name / "select.json").write_text(json.dumps(report))


def test_one_row_per_built_recipe_smallest_first(sizes, tmp_path, capsys):
    _select(tmp_path, "kws", 80_000, ["DTYPE_PROMOTION", "VALUE_LISTS"])
    _select(tmp_path, "mlp", 72_915, [])
    assert sizes.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["mlp", "kws"]
    assert sizes.size_row(tmp_path / "kws" / "select.json") == {
        "recipe": "kws", "operators": 2, "runtime features": "DTYPE_PROMOTION, VALUE_LISTS", "bytes": 80_000,
        "zip bytes": 40_000, "share of the full runtime": "10.0%", "full runtime bytes": 800_000}


def test_a_folder_without_builds_is_an_error(sizes, tmp_path):
    with pytest.raises(SystemExit):
        sizes.main([str(tmp_path)])
