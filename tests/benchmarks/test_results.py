"""benchmarks/results.py: the JSON a benchmark writes and the table rendered from it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from tests.benchmarks.support import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    return load_script("results")


def test_save_writes_the_record_and_its_table(results, tmp_path, monkeypatch):
    for name in results.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "load.py"), "build/mlp/mlp.pte", "--results"])
    rows = [{"pte": "mlp", "load_us": 12.34567, "call": {"us": 3.0}}, {"pte": "a|b", "load_us": 10452.4, "ok": True},
            {"pte": "big", "load_us": 2026, "call": {"us": 72891}}]
    path = results.save("load", rows, title="Load times", columns=["pte", "load_us", "call.us", "ok"],
                        notes=["one note"], extra={"threads": 1}, folder=tmp_path)
    record = json.loads(path.read_text())
    assert path == tmp_path / "load.json"
    assert record["command"] == "python benchmarks/load.py build/mlp/mlp.pte --results"
    assert record["rows"] == rows
    assert record["machine"]["cpus"] >= 1 and "load_at_end" in record["machine"]
    table = (tmp_path / "load.md").read_text()
    assert table.startswith("# Load times\n")
    assert "- command: `python benchmarks/load.py build/mlp/mlp.pte --results`" in table
    assert "| pte | load_us | call.us | ok |" in table
    assert "| mlp | 12.35 | 3 | — |" in table
    assert "| a\\|b | 10,452 | — | yes |" in table
    assert "| big | 2026 | 72,891 | — |" in table
    assert "- one note" in table and "- threads: 1" in table
    assert sorted(p.name for p in tmp_path.iterdir()) == ["load.json", "load.md"]


def test_the_command_names_the_thread_variables_it_ran_with(results, tmp_path, monkeypatch):
    for name in results.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "matvec_forms.py"), "512", "1536"])
    record = json.loads(results.save("m", [{"a": 1}], title="M", folder=tmp_path).read_text())
    assert record["command"] == "OPENBLAS_NUM_THREADS=1 python benchmarks/matvec_forms.py 512 1536"


def test_render_again_from_the_json_alone(results, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["x.py"])
    path = results.save("x", [{"a": 1}], title="X", folder=tmp_path)
    first = (tmp_path / "x.md").read_text()
    (tmp_path / "x.md").unlink()
    results.main([str(path)])
    assert (tmp_path / "x.md").read_text() == first


def test_a_name_with_a_folder_is_refused(results, tmp_path):
    with pytest.raises(ValueError, match="plain file stem"):
        results.save("../x", [], title="X", folder=tmp_path)


def test_the_option_defaults_to_the_scripts_name(results):
    parser = argparse.ArgumentParser()
    results.add_option(parser, "load")
    assert parser.parse_args([]).results is None
    assert parser.parse_args(["--results"]).results == "load"
    assert parser.parse_args(["--results", "load-small"]).results == "load-small"
