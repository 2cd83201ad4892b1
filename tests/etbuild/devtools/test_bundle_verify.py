"""`verify: {bundle: true}` and `etbuild run x.bpte --verify`: ours and ExecuTorch's bundles, in both runtimes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.build.driver import build
from etbuild.cli import main
from etbuild.devtools import bundle_format as bf
from etbuild.devtools.bundle_verify import Tolerance, judge, load_tolerances, verify_bundle
from etbuild.recipe import load_recipe
from tests.conftest import requires_executorch

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mlp with `verify: {bundle: true}`, built: its build directory."""
    root = tmp_path_factory.mktemp("bundle")
    recipe = root / "mlp-bundle.yaml"
    recipe.write_text(f"name: mlp-bundle\nextends: {REPO / 'recipes/mlp.yaml'}\nverify: {{bundle: true}}\n")
    result = build([recipe], root / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    return root / "build" / "mlp-bundle"


def test_build_writes_the_bundle_beside_the_pte(bundled: Path) -> None:
    bundle = bf.read_bundle((bundled / "mlp-bundle.bpte").read_bytes())
    assert bytes(bundle.program) == (bundled / "mlp-bundle.pte").read_bytes()
    recipe = load_recipe(REPO / "recipes/mlp.yaml")
    (suite,) = bundle.method_test_suites
    assert (suite.method_name, len(suite.test_cases)) == ("forward", recipe.verify.samples)
    report = json.loads((bundled / "verify.json").read_text())["bundle"]
    assert report["file"] == "mlp-bundle.bpte" and report["tolerances"]["forward"]["rtol"] == 0.0
    bounds = [o["bound"] for o in json.loads((bundled / "verify.json").read_text())["methods"]["forward"]]
    assert report["tolerances"]["forward"]["atol"] == max(bounds)


def test_expected_outputs_are_eager_torch(bundled: Path) -> None:
    from etbuild.model import build_model

    case = bf.read_bundle((bundled / "mlp-bundle.bpte").read_bytes()).method_test_suites[0].test_cases[2]
    x = bf.value_object(case.inputs[0], "x")
    with torch.no_grad():
        eager = build_model(load_recipe(REPO / "recipes/mlp.yaml"))(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(bf.value_object(case.expected_outputs[0], "x"), eager)


def test_run_verify_reports_each_case(bundled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(bundled / "mlp-bundle.bpte"), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "tolerances from the build's verify.json" in out and "4 of 4 cases passed" in out
    assert out.count(" ok") == 4


def test_run_verify_fails_on_a_wrong_expectation(bundled: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bundle = bf.read_bundle((bundled / "mlp-bundle.bpte").read_bytes())
    cases = [([bf.value_object(v, "") for v in c.inputs], [bf.value_object(v, "") for v in c.expected_outputs])
             for c in bundle.method_test_suites[0].test_cases]
    cases[1][1][0][0, 3] += 0.5
    path = tmp_path / "wrong.bpte"
    path.write_bytes(bf.write_bundle(bytes(bundle.program), {"forward": cases}))
    assert main(["run", str(path), "--verify", "--atol", "1e-4"]) == 4
    captured = capsys.readouterr()
    assert "3 of 4 cases passed" in captured.out and "forward case 1" in captured.err
    results = verify_bundle(path, default=Tolerance(0.0, 1e-4))
    assert [r.passed for r in results] == [True, False, True, True]
    assert results[1].max_abs_error == pytest.approx(0.5, abs=1e-3) and results[1].bound == 1e-4


def test_judge_is_executorchs_per_element_test() -> None:
    expected = [np.array([100.0, 0.001], np.float32)]
    assert judge("m", 0, expected, [np.array([100.0009, 0.001], np.float32)], Tolerance(1e-5, 1e-8)).passed
    assert not judge("m", 0, expected, [np.array([100.0, 0.0011], np.float32)], Tolerance(1e-5, 1e-8)).passed
    ints = [np.array([1, 2], np.int64)]
    assert not judge("m", 0, ints, [np.array([1, 3], np.int64)], Tolerance(1.0, 1.0)).passed
    shape = judge("m", 0, ints, [np.array([1], np.int64)], Tolerance())
    assert not shape.passed and shape.problem == "output 0 is [1], [2] expected"


def test_tolerances_of_another_bundle_are_not_used(bundled: Path, tmp_path: Path) -> None:
    assert load_tolerances(bundled / "mlp-bundle.bpte")["forward"].rtol == 0.0
    other = bundled / "other.bpte"
    assert load_tolerances(other) == {} and load_tolerances(tmp_path / "x.bpte") == {}


def test_cases_for_a_method_the_program_lacks(bundled: Path, tmp_path: Path, capsys) -> None:
    program = bf.read_bundle((bundled / "mlp-bundle.bpte").read_bytes()).program
    path = tmp_path / "odd.bpte"
    path.write_bytes(bf.write_bundle(bytes(program), {"encode": [([np.zeros((1, 784), np.float32)], [])]}))
    assert main(["run", str(path), "--verify"]) == 5
    assert "odd.bpte: test cases for method 'encode', which the program does not have (it has forward)" in \
        capsys.readouterr().err


def test_run_without_inputs_or_verify_is_a_usage_error(bundled: Path, capsys) -> None:
    assert main(["run", str(bundled / "mlp-bundle.pte")]) == 2
    assert "--inputs and --out are required" in capsys.readouterr().err


@requires_executorch
def test_executorch_verifies_our_bundle(bundled: Path) -> None:
    from etbuild.verify.oracle_bundle import verify_in_executorch

    bpte = bundled / "mlp-bundle.bpte"
    assert verify_in_executorch(bpte, load_tolerances(bpte)) == [("forward", i, "") for i in range(4)]
    wrong = verify_in_executorch(bpte, {"forward": Tolerance(0.0, 0.0)})
    assert any(error for *_, error in wrong)  # the oracle does fail a case it should


@requires_executorch
def test_we_verify_executorchs_bundle(tmp_path: Path, capsys) -> None:
    """ExecuTorch builds the recipe's model and its bundle (BundledProgram + serializer); ours verifies it."""
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer

    from etbuild.model import build_model, sample_inputs
    from etbuild.verify.oracle import executorch_build

    recipe = load_recipe(REPO / "recipes/mlp.yaml")
    pte = executorch_build(recipe, tmp_path / "theirs.pte").path
    model = build_model(recipe)
    with torch.no_grad():
        cases = [MethodTestCase(list(s), [model(*s)]) for s in sample_inputs(recipe, 3, 5)]
    data = serialize_from_bundled_program_to_flatbuffer(
        BundledProgram(None, [MethodTestSuite("forward", cases)], pte_file_path=str(pte)))
    (tmp_path / "theirs.bpte").write_bytes(data)
    assert main(["run", str(tmp_path / "theirs.bpte"), "--verify", "--rtol", "1e-4", "--atol", "1e-5"]) == 0
    assert "3 of 3 cases passed" in capsys.readouterr().out


def test_quantized_tolerance_allows_what_verify_accepted() -> None:
    """A quantized output verify passed by SNR strays further than a step: the bundle allows it, with headroom."""
    from etbuild.verify.bundle import HEADROOM, tolerances

    recipe = load_recipe(REPO / "recipes/mlp-int8.yaml")
    ours = {"index": 0, "max_abs_error": 0.3, "step": 0.01, "passed_by": "float64"}
    report = {"methods": {"forward": [ours]}, "executorch": {"methods": {"forward": [{**ours, "max_abs_error": 0.4}]}}}
    tol = tolerances(recipe, report, quantized=True)["forward"]
    assert tol == {"rtol": recipe.verify.rtol, "atol": pytest.approx(recipe.verify.atol + HEADROOM * 0.4)}
    within = {"methods": {"forward": [{**ours, "max_abs_error": 0.001}]}}
    assert tolerances(recipe, within, quantized=True)["forward"]["atol"] == pytest.approx(recipe.verify.atol + 0.01)


def test_bundle_is_a_verify_output_and_in_its_key(tmp_path: Path) -> None:
    from etbuild.build.layout import Artifacts
    from etbuild.build.stage_table import stage_calls
    from etbuild.build.stagerun import section_field

    plain, bundled = tmp_path / "plain.yaml", tmp_path / "bundled.yaml"
    plain.write_text(f"name: m\nextends: {REPO / 'recipes/mlp.yaml'}\n")
    bundled.write_text(f"name: m\nextends: {REPO / 'recipes/mlp.yaml'}\nverify: {{bundle: true}}\n")
    calls = {}
    for path in (plain, bundled):
        recipe = load_recipe(path)
        calls[path] = stage_calls(recipe, Artifacts.of(recipe, tmp_path / "build"))
    assert tmp_path / "build/m/m.bpte" in calls[bundled]["verify"].outputs
    assert tmp_path / "build/m/m.bpte" not in calls[plain]["verify"].outputs
    keys = [section_field(calls[p]["verify"].recipe, "verify") for p in (plain, bundled)]
    assert keys[0] != keys[1] and keys[1]["bundle"] is True
    assert calls[plain]["emit"].sections == calls[bundled]["emit"].sections  # only verify reads it
