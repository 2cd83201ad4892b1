"""EXTERNAL_DATA: a program whose weights live in a `.ptd` (`emit: {weights: external}`) selects it, its
trimmed runtime runs the program with its data file, and a runtime trimmed without it refuses the program."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from etbuild.build.driver import build
from etbuild.errors import InvalidProgram
from etbuild.model import sample_inputs
from etbuild.recipe import load_recipe
from etbuild.runtime import Program
from etbuild.select import Contents, collect, generate_runtime, write_runtime
from etbuild.verify.trimmed import run_trimmed

MLP = Path(__file__).resolve().parents[3] / "recipes" / "mlp.yaml"
EXTERNAL_ONLY = ("aten::addmm.out", "aten::relu.out")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`mlp-ext` built with its weights in `mlp-ext.ptd`, and two input samples `mlp-ext.in.npz`."""
    root = tmp_path_factory.mktemp("external")
    recipe = root / "mlp-ext.yaml"
    recipe.write_text(f"extends: {MLP}\nname: mlp-ext\nemit: {{weights: external}}\n")
    result = build([recipe], root / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    samples = sample_inputs(load_recipe(recipe), 2, 7)
    np.savez(root / "mlp-ext.in.npz", **{f"s{j}_in0": s[0].numpy() for j, s in enumerate(samples)})
    return root


def _files(work: Path) -> tuple[Path, Path]:
    out = work / "build" / "mlp-ext"
    return out / "mlp-ext.pte", out / "mlp-ext.ptd"


def test_a_program_with_external_weights_selects_the_feature(work):
    pte, _ = _files(work)
    selection = collect(pte)
    assert selection.features == ("EXTERNAL_DATA",)
    assert selection.names == EXTERNAL_ONLY


def test_its_trimmed_runtime_runs_it_with_its_data_file(work):
    pte, ptd = _files(work)
    runtime = generate_runtime(collect(pte), work / "runtime", source="mlp-ext")
    shipped = {f.path for f in runtime.files}
    assert {"etbuild/runtime/data_files.py", "etbuild/runtime/format/ptd.py"} <= shipped
    assert "etbuild/runtime/backend_registry.py" not in shipped  # the named-data lookup needs no delegates
    out = work / "mlp-ext.out.npz"
    run_trimmed(runtime.root, pte, work / "mlp-ext.in.npz", out, data=[ptd])
    forward = Program.load(pte, [ptd]).load_method("forward")
    with np.load(work / "mlp-ext.in.npz") as inputs, np.load(out) as outputs:
        assert sorted(outputs.files) == ["s0_out0", "s1_out0"]
        for j in range(2):
            np.testing.assert_array_equal(outputs[f"s{j}_out0"], forward(inputs[f"s{j}_in0"])[0])


def test_a_runtime_without_the_feature_refuses_the_program(work):
    pte, ptd = _files(work)
    runtime = write_runtime(Contents(EXTERNAL_ONLY, ()), work / "no-external", source="mlp without data files")
    assert not any("data_files" in f.path or "ptd" in f.path for f in runtime.files)
    with pytest.raises(InvalidProgram) as err:
        run_trimmed(runtime.root, pte, work / "mlp-ext.in.npz", work / "refused.npz", data=[ptd])
    assert str(err.value) == (
        f"the trimmed runtime {runtime.root}: {pte}: loading it with .ptd data files needs the runtime feature "
        "EXTERNAL_DATA, which this trimmed runtime lacks (etbuild select builds the runtime a program needs)"
    )
    with pytest.raises(InvalidProgram) as err:  # without its .ptd: it cannot tell, but says what may be missing
        run_trimmed(runtime.root, pte, work / "mlp-ext.in.npz", work / "refused.npz")
    assert "if the constant lives in a .ptd data file, it needs the runtime feature EXTERNAL_DATA" in str(err.value)
