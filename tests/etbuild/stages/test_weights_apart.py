"""Every recipe kind built with `emit.weights: external` gives outputs identical to its single-file build.

Each case builds the recipe as written and again as `<name>-ext` (extending it, with its weights in
`<name>-ext.ptd`): verify passes for the pair (in ExecuTorch's runtime too, when installed), and the two
programs' outputs on the same inputs, in order on one loaded method, are the same bits. The mlp runs by
default; the other kinds (portable convolutions, quantized, XNNPACK float/int8/8da4w, two methods, state,
a language model) are slow. Two language models that differ only in a program setting (`max_prefill`) and
name one weights file get byte-identical `.ptd` files.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from etbuild.build.driver import build
from etbuild.model import sample_inputs
from etbuild.recipe import load_recipe
from etbuild.runtime import Program
from etbuild.runtime.data_files import load_data_file
from tests.llm_support import TINY, save_checkpoint, write_llm_recipe

RECIPES = Path(__file__).resolve().parents[3] / "recipes"
SLOW = ["kws", "cnn-int8", "transformer-int8-weight-only", "cnn-xnnpack", "mlp-int8-xnnpack", "transformer-int4",
        "two-method", "stateful"]
CASES = [pytest.param("mlp", id="mlp"), *(pytest.param(n, id=n, marks=pytest.mark.slow) for n in SLOW)]


def _external(root: Path, source: Path, name: str, weights: str = "external") -> Path:
    path = root / f"{name}.yaml"
    path.write_text(f"extends: {source.resolve()}\nname: {name}\nemit: {{weights: {weights}}}\n")
    return path


def _built(recipes: list[Path], root: Path) -> None:
    result = build(recipes, root / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed


def _outputs(pte: Path, data: list[Path], method: str, samples: list) -> list[list[np.ndarray]]:
    loaded = Program.load(pte, data).load_method(method)
    return [[np.asarray(o) for o in loaded(*(t.numpy() for t in s))] for s in samples]


def _assert_same_outputs(recipe_path: Path, ext_path: Path, root: Path) -> None:
    recipe, ext = load_recipe(recipe_path), load_recipe(ext_path)
    inside = root / "build" / recipe.name / f"{recipe.name}.pte"
    apart = root / "build" / ext.name / f"{ext.name}.pte"
    ptd = apart.parent / f"{ext.emit.weights.file}.ptd"
    data = [ptd] if load_data_file(ptd).entries else []
    for m in recipe.model.methods:
        samples = sample_inputs(recipe, 3, 7, m.name)
        for a, b in zip(_outputs(inside, [], m.name, samples), _outputs(apart, data, m.name, samples)):
            assert all(np.array_equal(x, y) for x, y in zip(a, b)), f"{recipe.name} {m.name}"
    report = json.loads((apart.parent / "verify.json").read_text())
    assert report["passed"] and report.get("executorch", {}).get("passed", True)
    assert apart.stat().st_size <= inside.stat().st_size


@pytest.mark.parametrize("name", CASES)
def test_weights_apart_give_the_same_outputs(name, tmp_path):
    source = RECIPES / f"{name}.yaml"
    ext = _external(tmp_path, source, f"{name}-ext")
    _built([source, ext], tmp_path)
    _assert_same_outputs(source, ext, tmp_path)


@pytest.mark.slow
def test_language_models_share_what_coincides(tmp_path):
    save_checkpoint(tmp_path / "ckpt", TINY)
    llm = {"path": "ckpt", "max_context": 64}
    short = write_llm_recipe(tmp_path, "short", {**llm, "max_prefill": 8}, emit={"weights": {"file": "base"}})
    long = write_llm_recipe(tmp_path, "long", {**llm, "max_prefill": 16}, emit={"weights": {"file": "base"}})
    inside = write_llm_recipe(tmp_path, "inside", {**llm, "max_prefill": 8})
    _built([short, long, inside], tmp_path)
    out = tmp_path / "build"
    assert (out / "short" / "base.ptd").read_bytes() == (out / "long" / "base.ptd").read_bytes()
    assert (out / "short" / "short.pte").read_bytes() != (out / "long" / "long.pte").read_bytes()
    assert len(load_data_file(out / "short" / "base.ptd").entries) > 0
    _assert_same_outputs(inside, short, tmp_path)
