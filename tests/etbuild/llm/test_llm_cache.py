"""A `model.llm` folder's files key the stages that read it: editing the checkpoint rebuilds."""

from __future__ import annotations

from etbuild.build.layout import Artifacts
from etbuild.build.stage_table import stage_calls
from etbuild.recipe import load_recipe
from tests.llm_support import save_checkpoint, train_tokenizer, write_llm_recipe


def test_checkpoint_files_are_sources_of_the_model_stages(tmp_path):
    folder = save_checkpoint(tmp_path / "ckpt")
    train_tokenizer(folder)
    recipe = load_recipe(write_llm_recipe(tmp_path, "m", {"path": "ckpt", "max_context": 16, "max_prefill": 4}))
    calls = stage_calls(recipe, Artifacts.of(recipe, tmp_path / "build"))
    names = {path.name for path in calls["export"].sources}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert (tmp_path / "build" / "m" / "tokenizer.json") in calls["emit"].outputs
