"""End-to-end recipe builds through doit: incremental rebuilds, determinism, failures."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from etbuild.build.driver import build
from etbuild.cli import main
from etbuild.runtime import Program

RECIPE = """\
name: tiny
model:
  factory: etbuild.zoo:mlp
  kwargs: {sizes: [12, 24, 6]}
  inputs: [{shape: [3, 12], dtype: float32}]
memory: {planner: greedy, alignment: 16}
verify: {samples: 2, rtol: 1.0e-4, atol: 1.0e-5}
"""
STAGES = ["export:tiny", "lower:tiny", "plan:tiny", "emit:tiny", "select:tiny", "verify:tiny"]


def _build(recipe: Path, root: Path):
    return build([recipe], root, stream=io.StringIO())


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    recipe = tmp_path / "recipes" / "tiny.yaml"
    recipe.parent.mkdir()
    recipe.write_text(RECIPE)
    return recipe, tmp_path / "build"


def test_build_runs_every_stage_then_nothing(project):
    recipe, root = project
    first = _build(recipe, root)
    assert (first.exit_code, first.executed) == (0, STAGES)
    assert json.loads((root / "tiny" / "verify.json").read_text())["passed"] is True
    second = _build(recipe, root)
    assert (second.exit_code, second.executed, second.up_to_date) == (0, [], STAGES)


def test_editing_verify_reruns_only_verify(project):
    recipe, root = project
    _build(recipe, root)
    recipe.write_text(RECIPE.replace("atol: 1.0e-5", "atol: 2.0e-5"))
    assert _build(recipe, root).executed == ["verify:tiny"]


def test_editing_memory_never_reruns_export_or_lower(project):
    recipe, root = project
    _build(recipe, root)
    recipe.write_text(RECIPE.replace("planner: greedy", "planner: naive"))
    executed = _build(recipe, root).executed
    assert executed[0] == "plan:tiny"
    assert "export:tiny" not in executed and "lower:tiny" not in executed
    plan = json.loads((root / "tiny" / "plan.json").read_text())
    assert plan["methods"][0]["planner"] == "naive"


def test_same_recipe_gives_byte_identical_files(project, tmp_path):
    recipe, root = project
    _build(recipe, root)
    _build(recipe, tmp_path / "other")
    for name in ("tiny.pte", "lowered.debug.json", "etrecord.bin"):
        assert (root / "tiny" / name).read_bytes() == (tmp_path / "other" / "tiny" / name).read_bytes()


def test_no_temporary_files_are_left(project):
    recipe, root = project
    _build(recipe, root)
    assert sorted(p.name for p in (root / "tiny").iterdir()) == [
        "etrecord.bin", "export", "lowered.constants.json", "lowered.debug.json", "lowered.unplanned", "memory.json",
        "memory.svg", "plan.json", "runtime", "select.json", "selected_operators.yaml", "tiny.pte", "verify.json"]
    assert [p.name for p in (root / "tiny" / "export").iterdir()] == ["forward.pt2"]
    assert list(root.rglob("*.pte")) == [root / "tiny" / "tiny.pte"]  # the intermediate is not named as a product


def test_operator_executorch_lacks_fails_the_build_naming_it(tmp_path):
    model = tmp_path / "bessel.py"
    model.write_text(
        "import torch\n"
        "class Bessel(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.special.bessel_j0(x) + 1\n"
        "def make():\n"
        "    return Bessel()\n"
    )
    recipe = tmp_path / "bessel.yaml"
    recipe.write_text("name: bessel\nmodel:\n  factory: bessel.py:make\n  inputs: [{shape: [4], dtype: float32}]\n")
    out = io.StringIO()
    result = build([recipe], tmp_path / "build", stream=out)
    assert result.exit_code != 0
    assert result.executed == ["export:bessel", "lower:bessel"]
    assert result.failed["lower:bessel"] == (
        "lower step 'fit-operator-set' (after decompose, fold-linear): operator prims.bessel_j0.default has "
        "no out-variant to "
        "call (ExecuTorch's runtime calls only out-variants), and neither etbuild nor torch has a decomposition of "
        "it; torch's decomposition of aten.special_bessel_j0.default, which the model calls, calls it; to build "
        "this model, express aten.special_bessel_j0.default with operators "
        "ExecuTorch has (in the model, or as a decomposition in etbuild/lowering/decompositions.py), or leave it "
        "to a backend that runs it\n"
        "  in method 'forward', node bessel_j0 (prims.bessel_j0.default)\n"
        f"  from <root> (Bessel) at {model}:4: return torch.special.bessel_j0(x) + 1"
    )
    assert "Traceback" not in out.getvalue()
    assert not (tmp_path / "build" / "bessel" / "bessel.pte").exists()


def test_cli_build_run_inspect(project, capsys):
    recipe, root = project
    assert main(["build", str(recipe), "--build-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "verify:tiny" in out and "ok: 1 recipe(s), 6 task(s) run, 0 up to date" in out
    pte = root / "tiny" / "tiny.pte"
    x = np.random.default_rng(0).standard_normal((3, 12)).astype(np.float32)
    np.savez(root / "in.npz", in0=x)
    assert main(["run", str(pte), "--inputs", str(root / "in.npz"), "--out", str(root / "out.npz")]) == 0
    with np.load(root / "out.npz") as npz:
        np.testing.assert_array_equal(npz["out0"], Program.load(pte).load_method()(x)[0])
    assert main(["inspect", str(pte)]) == 0
    text = capsys.readouterr().out
    assert "method forward: 3 instructions" in text
    assert "input  0: float32[3, 12]" in text and "output 0: float32[3, 6]" in text
    assert "2 x aten::addmm.out" in text and "1 x aten::relu.out" in text
    assert "trimmed runtime: " in text and "  runtime features: none; tensor dtypes: float32\n" in text


def test_cli_reports_errors_in_one_paragraph(tmp_path, capsys):
    missing = tmp_path / "missing.pte"
    assert main(["run", str(missing), "--inputs", "x", "--out", "y"]) == 2
    assert capsys.readouterr().err == f"error: {missing}: No such file or directory\n"
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"\x00" * 64)
    assert main(["inspect", str(bad)]) == 5
    assert capsys.readouterr().err == f"error: {bad}: identifier is b'\\x00\\x00\\x00\\x00', expected b'ET12'\n"


def test_an_input_dtype_the_model_cannot_take_fails_export_naming_the_key(project):
    recipe, root = project
    recipe.write_text(RECIPE.replace("dtype: float32", "dtype: int64"))
    result = _build(recipe, root)
    assert result.failed == {"export:tiny": (
        f"{recipe}:5:29: model.inputs[0].dtype: expected a dtype the model takes; got int64 (forward raised"
        " RuntimeError: mat1 and mat2 must have the same dtype, but got Long and Float; it runs with float32)"
    )}
    assert not (root / "tiny" / "export").exists()


def test_a_failing_recipe_does_not_stop_the_others(project, capsys):
    recipe, root = project
    broken = recipe.with_name("broken.yaml")
    broken.write_text(RECIPE.replace("name: tiny", "name: broken").replace("dtype: float32", "dtype: int64"))
    result = build([broken, recipe], root, stream=io.StringIO())
    assert list(result.failed) == ["export:broken"] and result.exit_code != 0
    assert [t for t in result.executed if t.endswith(":tiny")] == STAGES  # built after broken failed
    assert sorted(result.blocked) == sorted(s.replace("tiny", "broken") for s in STAGES[1:])
    assert main(["build", str(broken), str(recipe), "--build-dir", str(root)]) != 0
    assert "failed: 1 of 2 recipe(s), 1 task(s) run, 6 up to date (failed: broken)" in capsys.readouterr().out


def test_operator_outside_the_allowlist_fails_select_naming_it_and_its_source(project):
    recipe, root = project
    recipe.write_text(RECIPE + "operators:\n  allow: [aten::addmm.out, 'aten::view*']\n")
    result = _build(recipe, root)
    assert result.executed == ["export:tiny", "lower:tiny", "plan:tiny", "emit:tiny", "select:tiny"]
    assert result.failed["select:tiny"] == (
        f"{recipe}:9:3: operators.allow: the program calls operators outside the allowlist:\n"
        "  aten::relu.out (1 call) from 1 (ReLU) at torch/nn/modules/activation.py:143: "
        "return F.relu(input, inplace=self.inplace)"
        "\n  add them to operators.allow, change the model so it does not call them, or leave them to a backend"
    )


def test_allowlist_file_and_trimmed_runtime(project):
    recipe, root = project
    (recipe.parent / "ops.txt").write_text("# the MLP's kernels\naten::addmm.out\naten::relu.out\n")
    recipe.write_text(RECIPE + "operators:\n  allow: ops.txt\n")
    assert _build(recipe, root).exit_code == 0
    report = json.loads((root / "tiny" / "select.json").read_text())
    assert sorted(report["operators"]) == ["aten::addmm.out", "aten::relu.out"]
    assert report["runtime_bytes"] < report["full_runtime_bytes"] / 3
    assert report["runtime_features"] == [] and report["tensor_dtypes"] == ["float32"]
    runtime = root / "tiny" / "runtime"
    assert (runtime / "tiny-runtime.zip").exists()
    assert not (runtime / "etbuild" / "kernels" / "portable" / "convolution.py").exists()
    (recipe.parent / "ops.txt").write_text("aten::addmm.out\n")
    assert _build(recipe, root).executed == ["select:tiny"]  # the allowlist file is read by select


def test_doit_at_the_repo_root_lists_every_stage_of_every_recipe():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-m", "doit", "list", "--all"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    names = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    assert {"export:mlp", "lower:mlp", "plan:mlp", "emit:mlp", "select:mlp", "verify:mlp", "verify:cnn-sram"} <= names
    assert not any("cnn-sram-overflow" in n for n in names)  # recipes/errors/ holds recipes that must fail


def test_dump_after_a_step_writes_its_graph_without_staling_the_build(project):
    recipe, root = project
    _build(recipe, root)
    dumped = build([recipe], root, stream=io.StringIO(), dump_after=["fold-constants"])
    assert (dumped.executed, dumped.up_to_date) == (["lower:tiny"], [s for s in STAGES if s != "lower:tiny"])
    dump = root / "tiny" / "dump" / "05-fold-constants.py"
    assert [p.name for p in dump.parent.iterdir()] == [dump.name]
    text = dump.read_text()
    assert text.startswith(
        "# method forward: 2 node(s) folded to constants at build time\n"
        "#   permute: float32[12, 24]\n#   permute_1: float32[24, 6]\nclass GraphModule(torch.nn.Module):\n"
    )
    assert 'addmm: "f32[3, 24]" = torch.ops.aten.addmm.default(p_0_bias, input_1, permute)' in text
    assert _build(recipe, root).executed == [] and dump.exists()  # the dump leaves lower up to date
    assert build([recipe], root, stream=io.StringIO(), dump_after=["fold-constants"]).executed == []
    recipe.write_text(RECIPE.replace("[12, 24, 6]", "[12, 20, 6]"))
    assert "lower:tiny" in _build(recipe, root).executed
    assert not dump.parent.exists()  # a lowering without dumps leaves none from an older one


def test_cli_dump_after_an_unknown_step_lists_the_steps(project, capsys):
    recipe, root = project
    assert main(["build", str(recipe), "--build-dir", str(root), "--dump-after", "all", "--dump-after", "fold"]) == 2
    assert capsys.readouterr().err == (
        "error: unknown lower step 'fold'; the steps are: decompose, fold-linear, fit-operator-set, "
        "move-weight-permutes, fold-constants, drop-assertions, fuse-batch-norm, drop-zero-points, "
        "fuse-quantized-embeddings, partition, decompose-outside, in-place-calls, grouped-attention, to-program "
        "(or 'all')\n"
    )
    assert not (root / "tiny").exists()


def test_parallel_jobs_report_a_failure_as_a_serial_build_does(project, capsys):
    recipe, root = project
    recipe.write_text(RECIPE + "operators:\n  allow: [aten::addmm.out]\n")
    other = recipe.parent / "tiny2.yaml"
    other.write_text(RECIPE.replace("name: tiny", "name: tiny2"))
    assert main(["build", str(recipe), str(other), "--build-dir", str(root), "-n", "2"]) == 3
    out = capsys.readouterr().out
    message = (
        f"{recipe}:9:3: operators.allow: the program calls operators outside the allowlist:\n"
        "  aten::relu.out (1 call) from 1 (ReLU) at torch/nn/modules/activation.py:143: "
        "return F.relu(input, inplace=self.inplace)"
        "\n  add them to operators.allow, change the model so it does not call them, or leave them to a backend"
    )
    assert f"  select:tiny                      ... FAILED\n\nerror: select:tiny: {message}\n\n" in out
    assert "internal error" not in out and "Traceback" not in out
