"""Quantized programs both ways with ExecuTorch (the oracle): every quantized recipe's `.pte`
in ExecuTorch's runtime against ours, and programs ExecuTorch builds with its own
XNNPACKQuantizer (static per-channel and dynamic, linear and conv models; to_edge and
to_executorch, no partitioner) in ours against its runtime. The oracle's other quantized
builds: calibrated on given inputs, and 8da4w (torchao's source transform, as ExecuTorch's LLM
flow applies it) delegated to XNNPACK.

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
import torch

from etbuild.build.driver import build
from etbuild.model import build_model, sample_inputs
from etbuild.recipe import Recipe, discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.verify.oracle import INT4_SCHEME, executorch_build, xnnpack_partitioner
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


def test_executorch_static_build_calibrates_on_the_given_inputs(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(f"name: m\nmodel:\n  {LINEAR}\n")
    recipe = load_recipe(path)
    wide = [tuple(t * 100 for t in s) for s in sample_inputs(recipe, 4, 0)]
    default = executorch_build(recipe, tmp_path / "default.pte", quantize="int8-static").path
    given = executorch_build(recipe, tmp_path / "given.pte", quantize="int8-static", calibration={"forward": wide}).path
    assert default.stat().st_size == given.stat().st_size  # the same program ...
    assert default.read_bytes() != given.read_bytes()  # ... with other activation scales


def test_executorch_8da4w_build_quantizes_the_linears_a_group_divides(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"  # 64 inputs: two groups of 32; the second layer's 48 inputs stay float
    path.write_text(f"name: m\nmodel:\n  {LINEAR}\nquantize: {{scheme: {INT4_SCHEME}, group_size: 32}}\n"
                    "backends: [{name: xnnpack}]\n")
    recipe = load_recipe(path)
    q = executorch_build(recipe, tmp_path / "q.pte", xnnpack_partitioner(), quantize=INT4_SCHEME).path
    f = executorch_build(recipe, tmp_path / "f.pte", xnnpack_partitioner()).path
    assert f.stat().st_size - q.stat().st_size > 64 * 48 * 3  # 4 of the first layer's 4.5 bytes per weight saved
    method, model = _executorch_method(q, "forward"), build_model(recipe)
    x = sample_inputs(recipe, 1, 7)[0]
    with torch.no_grad():
        expected = model(*x)
    actual = method.execute(list(x))[0]
    assert 0 < float((actual - expected).abs().max()) < 0.1 * float(expected.abs().max())
