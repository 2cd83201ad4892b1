"""`model.llm` recipes: expansion into the model section, and the errors for what a recipe gets wrong."""

from __future__ import annotations

import pytest

from etbuild.errors import RecipeError
from etbuild.llm.runner import decoder
from etbuild.recipe import load_recipe
from tests.llm_support import TINY, save_checkpoint, train_tokenizer, write_llm_recipe


def test_config_recipe_expands_into_the_runner_contract(tmp_path):
    recipe = load_recipe(write_llm_recipe(tmp_path, "t", {"config": TINY, "max_context": 64, "max_prefill": 16},
                                          llm={"attention": "portable"}))
    assert recipe.model.factory == "etbuild.llm.runner:decoder"
    (method,) = recipe.model.methods
    assert [(i.shape, i.dtype) for i in method.inputs] == [((1, 2), "int64"), ((1,), "int64")]
    assert method.dynamic[0][1].max == 16 and method.dynamic[0][1].min == 1
    assert recipe.section("model")["kwargs"]["max_context"] == 64


@pytest.mark.parametrize(("llm", "sections", "message"), [
    ({"config": {**TINY, "architecture": "GPT2LMHeadModel"}, "max_context": 64}, {},
     "model.llm.config.architecture: unsupported architecture: expected one of LlamaForCausalLM, Qwen2ForCausalLM, "
     "Qwen3ForCausalLM, MistralForCausalLM, Phi3ForCausalLM, GemmaForCausalLM; got 'GPT2LMHeadModel'"),
    ({"config": TINY, "max_context": 16, "max_prefill": 32}, {},
     "model.llm.max_prefill: expected at most max_context (16); got 32"),
    ({"path": "nowhere"}, {}, "model.llm.path: expected a Hugging Face folder with config.json;"),
    ({"config": TINY, "path": "x"}, {}, "model.llm: expected exactly one of path (a Hugging Face folder) and config"),
    ({"config": TINY}, {"llm": {"attention": "flash"}},
     "llm.attention: expected portable or custom; got 'flash'"),
    ({"config": TINY}, {"llm": {"kv_cache": "int4"}}, "llm.kv_cache: expected float32 or int8; got 'int4'"),
    ({"config": TINY}, {"llm": {"kv_cache": "int8"}},
     "llm.kv_cache: expected llm.attention: custom beside it (the int8 cache is written with llama::update_cache)"),
])
def test_bad_llm_sections_are_recipe_errors_naming_the_key(tmp_path, llm, sections, message):
    with pytest.raises(RecipeError, match=None) as info:
        load_recipe(write_llm_recipe(tmp_path, "bad", llm, **sections))
    assert message in str(info.value)
    assert "bad.yaml:" in str(info.value)


def test_a_missing_or_extra_tensor_is_named(tmp_path):
    folder = save_checkpoint(tmp_path / "ckpt")
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / "model.safetensors"))
    state["model.layers.9.mlp.up_proj.weight"] = state.pop("model.layers.1.mlp.up_proj.weight")
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="missing tensor\\(s\\) model.layers.1.mlp.up_proj.weight; "
                                         "extra tensor\\(s\\) model.layers.9.mlp.up_proj.weight"):
        decoder(path=str(folder), max_context=16, max_prefill=4)


def test_sharded_checkpoint_loads_every_shard(tmp_path):
    import torch

    folder = save_checkpoint(tmp_path / "ckpt", shard="40KB")
    assert len(list(folder.glob("*.safetensors"))) > 1
    loaded, reference = decoder(path=str(folder), max_context=16, max_prefill=4), decoder(config=TINY, seed=0)
    for (name, a), b in zip(loaded.decoder.model.state_dict().items(), reference.decoder.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_a_tokenizer_larger_than_the_vocabulary_is_a_build_error(tmp_path):
    folder = save_checkpoint(tmp_path / "ckpt", {**TINY, "vocab_size": 32})
    size = train_tokenizer(folder)
    with pytest.raises(ValueError, match=f"tokenizer.json has {size} tokens; the model's vocabulary has 32"):
        decoder(path=str(folder), max_context=16, max_prefill=4)


def test_a_config_json_that_is_not_json_is_a_recipe_error(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_bytes(b"{\"architectures\": [\xff")
    with pytest.raises(RecipeError, match="model.llm.path: .*config.json is not JSON"):
        load_recipe(write_llm_recipe(tmp_path, "bad", {"path": "ckpt"}))


def test_a_language_model_quantizes_int4_linears_with_gptq_unless_the_recipe_says(tmp_path):
    int4 = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"}
    llm = {"config": TINY, "max_context": 64, "max_prefill": 16}
    default = load_recipe(write_llm_recipe(tmp_path, "g", llm, quantize=int4, backends=[{"name": "xnnpack"}]))
    assert default.quantize.weights == "gptq"
    assert default.where("quantize.weights") == default.where("quantize.scheme")
    rounded = load_recipe(write_llm_recipe(tmp_path, "r", llm, quantize={**int4, "weights": "rounded"},
                                           backends=[{"name": "xnnpack"}]))
    assert rounded.quantize.weights == "rounded"
    static = load_recipe(write_llm_recipe(tmp_path, "s", llm, quantize={"scheme": "int8-dynamic"}))
    assert static.quantize.weights == "rounded"  # no int4 linears: the schema's default
