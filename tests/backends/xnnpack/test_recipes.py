"""Every recipe's model lowered by ExecuTorch to XNNPACK (float, static int8, dynamic int8) runs in our runtime.

Our outputs are compared with ExecuTorch's runtime on the same `.pte`, sample by sample (the
first sample at the upper bound of any dynamic dimension, the others smaller), on one loaded
method, so state carried across calls is compared too. Float programs match within the
recipe's verify tolerances. Quantized ones cannot match bit for bit through many layers:
XNNPACK sums int8 products in int32, we sum the same products in float32, and a rounding
tie that falls the other way moves one value by one step, which later layers spread. So
static int8 outputs must agree within a few output steps (almost all within one), dynamic
int8 ones within a small fraction of the output range. Dynamic int8 applies to the models
without convolutions; recurrent models run float only (quantizing their unrolled steps takes
ExecuTorch minutes, and the float program has the same node kinds). Recipes whose model and
inputs equal another's are lowered once. A recipe ExecuTorch cannot lower or quantize is
skipped with its reason. Skipped without the executorch oracle.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.model import build_model, sample_inputs
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.runtime import Program
from tests.backends.xnnpack.oracle import Lowered, delegated, lower_recipe, quant_step
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

FAST = {("mlp", None)}


def _distinct(paths: list[Path]) -> list[Path]:
    """One recipe per distinct model section, the shortest name first (cnn-sram differs from cnn in memory only)."""
    seen, kept = [], []
    for p in sorted(paths, key=lambda p: (len(p.stem), p.stem)):
        model = load_recipe(p).model
        if model not in seen:
            seen.append(model)
            kept.append(p)
    return kept


RECIPES = _distinct(discover_recipes(Path(__file__).resolve().parents[3] / "recipes"))


def _schemes(path: Path) -> tuple[str | None, ...]:
    modules = list(build_model(load_recipe(path)).modules())
    if any(isinstance(m, torch.nn.RNNBase) for m in modules):
        return (None,)
    if any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in modules):
        return (None, "static")
    return (None, "static", "dynamic")


CASES = [(p, q) for p in RECIPES for q in _schemes(p)]


@pytest.mark.parametrize(
    ("recipe_path", "quant"),
    [pytest.param(p, q, id=f"{p.stem}.{q or 'float'}", marks=() if (p.stem, q) in FAST else pytest.mark.slow)
     for p, q in CASES],
)
def test_executorch_xnnpack_program_runs_in_ours(recipe_path, quant):
    recipe = load_recipe(recipe_path)
    try:
        pte = lower_recipe(recipe, quant)
    except Exception as exc:  # noqa: BLE001  (ExecuTorch's own limits: reported, not ours to fix)
        pytest.skip(f"ExecuTorch cannot lower {recipe.name} ({quant or 'float'}): {type(exc).__name__}: {exc}"[:300])
    nodes, _ = delegated(pte)
    assert sum(nodes.values()) > 0, "nothing was delegated"
    step = quant_step(Lowered(pte, torch.nn.Identity(), nodes, []))
    program = Program(pte)
    from executorch.runtime import Runtime

    executorch = Runtime.get().load_program(pte)
    for m in recipe.model.methods:
        ours, theirs = program.load_method(m.name), executorch.load_method(m.name)
        for sample in sample_inputs(recipe, 3, 7, m.name):
            expected = [np.asarray(t) for t in theirs.execute(list(sample))]
            actual = ours(*[t.numpy() for t in sample])
            assert len(actual) == len(expected)
            for a, e in zip(actual, expected):
                _assert_agree(np.asarray(a, dtype=np.float64), e.astype(np.float64), recipe.verify, quant, step)


def _assert_agree(actual: np.ndarray, expected: np.ndarray, verify, quant: str | None, step: float) -> None:
    assert actual.shape == expected.shape
    if quant is None or not expected.size:
        np.testing.assert_allclose(actual, expected, rtol=max(verify.rtol, 1e-5), atol=max(verify.atol, 1e-6))
        return
    diff = np.abs(actual - expected)
    if quant == "static":
        assert diff.max() <= 4.001 * step, f"differs by {diff.max() / step:.2f} output steps"
        assert np.mean(diff > 1.001 * step) <= 0.01, "more than 1% of the outputs differ by more than a step"
    else:
        span = float(np.abs(expected).max()) or 1.0
        assert diff.max() <= 0.02 * span and diff.mean() <= 0.002 * span, f"max {diff.max()}, mean {diff.mean()}"
