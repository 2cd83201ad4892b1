"""Quantized programs both ways with ExecuTorch (the oracle): every quantized recipe's `.pte`
in ExecuTorch's runtime against ours, and programs ExecuTorch builds with its own
XNNPACKQuantizer (static per-channel and dynamic, linear and conv models; to_edge and
to_executorch, no partitioner) in ours against its runtime.

ExecuTorch's runtime knows the quantized_decomposed kernels once `executorch.kernels.quantized`
is imported. Both runtimes implement the same kernels, so outputs agree to float rounding;
a requantization whose float input lands on a rounding tie may flip one step, hence a
tolerance of one output quantization step (taken from the output's range over 255 steps).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from etbuild.build.driver import build
from etbuild.model import sample_inputs
from etbuild.recipe import Recipe, discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.verify.oracle import executorch_build
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

RECIPES = [p for p in discover_recipes(Path(__file__).resolve().parents[2] / "recipes") if load_recipe(p).quantize]
FAST = {"mlp-int8", "kws-int8-dynamic"}  # the others take minutes each: slow
PARAMS = [pytest.param(p, id=p.stem, marks=() if p.stem in FAST else pytest.mark.slow) for p in RECIPES]


def _executorch_method(pte: Path, method: str):
    import executorch.kernels.quantized  # noqa: F401  (registers the quantized_decomposed kernels)
    from executorch.runtime import Runtime

    return Runtime.get().load_program(pte).load_method(method)


def _assert_close(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs)
    for a, e in zip(ours, theirs):
        e = np.asarray(e)
        step = float(np.ptp(e)) / 255 if e.size else 0.0
        np.testing.assert_allclose(np.asarray(a), e, rtol=1e-5, atol=max(step, 1e-6))


def _compare(recipe: Recipe, pte: Path) -> None:
    for method in (m.name for m in recipe.model.methods):
        ours = Program.load(pte).load_method(method)
        theirs = _executorch_method(pte, method)
        for sample in sample_inputs(recipe, 3, 7, method):
            _assert_close(ours(*[t.numpy() for t in sample]), [t.numpy() for t in theirs.execute(list(sample))])


@pytest.mark.parametrize("recipe_path", PARAMS)
def test_our_quantized_pte_runs_in_executorch(tmp_path: Path, recipe_path: Path) -> None:
    recipe = load_recipe(recipe_path)
    result = build([recipe_path], tmp_path, stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    _compare(recipe, tmp_path / recipe.name / f"{recipe.name}.pte")


LINEAR = "factory: etbuild.zoo:mlp\n  kwargs: {sizes: [64, 48, 10]}\n  inputs: [{shape: [2, 64], dtype: float32}]"
CONV = ("factory: etbuild.zoo:kws_cnn\n  kwargs: {features: 8, channels: [16, 16], num_classes: 4}\n"
        "  inputs: [{shape: [1, 8, 24], dtype: float32}]")


@pytest.mark.parametrize(("model", "scheme"), [
    (LINEAR, "int8-static"), (CONV, "int8-static"), (LINEAR, "int8-dynamic"),
], ids=["linear-static", "conv-static", "linear-dynamic"])
def test_executorch_quantized_pte_runs_in_ours(tmp_path: Path, model: str, scheme: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(f"name: m\nmodel:\n  {model}\n")
    recipe = load_recipe(path)
    pte = executorch_build(recipe, tmp_path / "theirs.pte", quantize=scheme).path
    operators = {op.name for op in Program.load(pte).plan("forward").operators}
    assert "quantized_decomposed::dequantize_per_channel" in operators  # per-channel int8 weights
    if scheme == "int8-dynamic":
        assert "quantized_decomposed::choose_qparams" in operators
    _compare(recipe, pte)


def test_verify_runs_a_portable_quantized_program_in_executorchs_runtime(tmp_path: Path) -> None:
    """The oracle subprocess registers quantized_decomposed's kernels when the program calls them."""
    from etbuild.verify.oracle import run_samples_in_executorch
    from etbuild.verify.oracle_samples import needs_quantized_kernels
    from etbuild.verify.stage import run_samples

    path = tmp_path / "m.yaml"
    path.write_text(f"name: m\nmodel:\n  {LINEAR}\nquantize: {{scheme: int8-static}}\n")
    recipe = load_recipe(path)
    assert build([path], tmp_path / "build", stream=io.StringIO()).exit_code == 0
    pte = tmp_path / "build" / "m" / "m.pte"
    assert needs_quantized_kernels(pte.read_bytes())
    samples = sample_inputs(recipe, 2, 7)
    theirs = run_samples(run_samples_in_executorch, pte, samples)  # failed: no kernel for dequantize_per_channel
    ours = Program.load(pte).load_method("forward")
    for sample, outputs in zip(samples, theirs):
        _assert_close(ours(*[t.numpy() for t in sample]), outputs)
