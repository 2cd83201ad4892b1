"""`inspect --data`, `run --data` and `profile --data` on a program whose weights live in a `.ptd`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.cli import main
from etbuild.pipeline import compile_module
from etbuild.recipe import WeightsConfig
from etbuild.runtime.data_report import data_report, external_keys
from etbuild.runtime.program import Program


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    root = tmp_path_factory.mktemp("pair")
    built = compile_module(model, (torch.randn(1, 6),), weights=WeightsConfig("w"))
    (root / "m.pte").write_bytes(built.pte)
    (root / "w.ptd").write_bytes(built.ptd)
    (root / "other.ptd").write_bytes(compile_module(torch.nn.Linear(6, 2), (torch.randn(1, 6),),
                                                    weights=WeightsConfig("o")).ptd)
    np.savez(root / "in.npz", in0=np.ones((1, 6), np.float32))
    return root / "m.pte", root / "w.ptd", root / "other.ptd"


def test_inspect_lists_the_keys_and_says_whether_the_data_satisfies_them(pair, capsys):
    pte, ptd, other = pair
    keys = external_keys(Program.load(pte).program)
    assert {"0.bias", "2.bias"} <= set(keys) and keys["0.bias"] == {"dtype": "float32", "shape": [5],
                                                                       "methods": ["forward"]}
    assert main(["inspect", str(pte), "--data", str(ptd)]) == 0
    assert "satisfied" in capsys.readouterr().out
    assert main(["inspect", str(pte), "--data", str(other)]) == 5
    out = capsys.readouterr().out
    assert "NOT satisfied" in out and "key '0.bias' is neither in the program nor in its data files" in out
    assert data_report(pte, [])["data"] == []


def test_run_and_profile_take_data_files(pair, tmp_path, capsys):
    pte, ptd, _ = pair
    inputs = pte.parent / "in.npz"
    assert main(["run", str(pte), "--inputs", str(inputs), "--out", str(tmp_path / "o.npz"), "--data", str(ptd)]) == 0
    assert np.load(tmp_path / "o.npz")["out0"].shape == (1, 2)
    assert main(["run", str(pte), "--inputs", str(inputs), "--out", str(tmp_path / "x.npz")]) == 5
    assert main(["profile", str(pte), "--data", str(ptd), "--calls", "1"]) == 0
