"""Every recipe of `recipes/` as a bundled program, both ways: `verify: {bundle: true}` writes our
`.bpte`; ExecuTorch's runtime verifies it (pybindings) and ours does (`verify_bundle`); ours
verifies ExecuTorch's own `.bpte` of the same model (its export → lower flow, the recipe's
quantizer scheme and XNNPACK partitioner where the recipe has them; the expected outputs are its
runtime's, as a user bundling from a device run would take them).

Each recipe builds in its own temporary tree (slow: `-m slow`), except `mlp`.
Skipped without the executorch oracle.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from etbuild.build.driver import build
from etbuild.devtools.bundle_verify import Tolerance, load_tolerances, verify_bundle
from etbuild.model import sample_inputs
from etbuild.recipe import Recipe, discover_recipes, load_recipe
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

RECIPES = discover_recipes(Path(__file__).resolve().parents[2] / "recipes")
FAST = {"mlp"}


def _bundled_build(path: Path, tmp: Path) -> Path:
    """The recipe with `verify: {bundle: true}` (same name), built under tmp: its `.bpte`."""
    recipe = load_recipe(path)
    bundled = tmp / "recipes" / path.name
    bundled.parent.mkdir()
    bundled.write_text(f"name: {recipe.name}\nextends: {path}\nverify: {{bundle: true}}\n")
    result = build([bundled], tmp / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    return tmp / "build" / recipe.name / f"{recipe.name}.bpte"


def _oracle_args(recipe: Recipe) -> dict[str, Any]:
    from etbuild.verify.oracle import INT4_SCHEME, ORACLE_SCHEMES, shared_state_config, xnnpack_partitioner

    scheme = recipe.quantize.scheme if recipe.quantize else None
    args: dict[str, Any] = {"quantize": scheme if scheme == INT4_SCHEME else ORACLE_SCHEMES.get(scheme or "")}
    if any(b.name == "xnnpack" for b in recipe.backends):
        args["partitioner"] = xnnpack_partitioner()
    if len(recipe.model.methods) > 1:
        args["config"] = shared_state_config()
    return args


def _executorch_bundle(recipe: Recipe, tmp: Path) -> Path:
    """ExecuTorch's `.bpte` of the recipe's model: its build, 3 samples per method, its runtime's outputs."""
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer

    from etbuild.verify.oracle import executorch_build, executorch_methods

    pte = executorch_build(recipe, tmp / "theirs.pte", **_oracle_args(recipe)).path
    suites = []
    for m in recipe.model.methods:
        (run,) = executorch_methods(pte, m.name)
        samples = sample_inputs(recipe, 3, 7, m.name)
        cases = [MethodTestCase(list(s), [torch.from_numpy(o) for o in run(*[t.numpy() for t in s])])
                 for s in samples]
        suites.append(MethodTestSuite(m.name, cases))
    path = tmp / "theirs.bpte"
    path.write_bytes(serialize_from_bundled_program_to_flatbuffer(BundledProgram(None, suites,
                                                                                 pte_file_path=str(pte))))
    return path


def _their_tolerance(recipe: Recipe, bpte: Path, ours: Tolerance | None) -> Tolerance:
    """The recipe's tolerances; for a quantized program also one int8 step of the outputs' range (a
    rounding flip between two runtimes' kernels, as tests/interop/test_quantized.py allows) and at
    least what the build allows our own bundle of the recipe (flips that propagate through a deep
    int8 network: etbuild.verify.bundle)."""
    from etbuild.devtools.bundle_format import read_bundle, value_object

    atol = max(recipe.verify.atol, 1e-6)
    if recipe.quantize:
        expected = [value_object(v, "") for s in read_bundle(bpte.read_bytes()).method_test_suites
                    for c in s.test_cases for v in c.expected_outputs]
        atol = max([atol, ours.atol if ours else 0.0, *(float(np.ptp(e)) / 255 for e in expected if e.size)])
    return Tolerance(max(recipe.verify.rtol, 1e-5), atol)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem, marks=() if p.stem in FAST else pytest.mark.slow)
                                  for p in RECIPES])
def test_bundles_verify_in_both_runtimes(path: Path, tmp_path: Path) -> None:
    from etbuild.verify.oracle_bundle import verify_in_executorch

    recipe = load_recipe(path)
    ours = _bundled_build(path, tmp_path)
    tolerances = load_tolerances(ours)
    assert set(tolerances) == {m.name for m in recipe.model.methods}
    failed = [r for r in verify_in_executorch(ours, tolerances) if r[2]]
    assert not failed, f"ExecuTorch's runtime fails our bundle: {failed}"
    assert all(r.passed for r in verify_bundle(ours, tolerances)), verify_bundle(ours, tolerances)
    theirs = _executorch_bundle(recipe, tmp_path)
    results = verify_bundle(theirs, {m: _their_tolerance(recipe, theirs, tolerances.get(m)) for m in tolerances})
    assert len(results) == 3 * len(recipe.model.methods)
    assert all(r.passed for r in results), results
