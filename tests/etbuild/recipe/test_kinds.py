"""Model kinds: each recipe's model has one kind, the stages ask it, and no other module tells kinds apart."""

from __future__ import annotations

import re
from pathlib import Path

from etbuild.recipe import load_recipe
from etbuild.recipe.kinds import DECODER, KINDS, MODULE, Ref, kind_of
from tests.llm_support import TINY, write_llm_recipe

ROOT = Path(__file__).resolve().parents[3]
LLM = {"config": TINY, "max_context": 32, "max_prefill": 4}


def test_a_factory_makes_a_plain_module_and_model_llm_a_decoder(tmp_path):
    assert kind_of(load_recipe(ROOT / "recipes" / "mlp.yaml")) is MODULE
    decoder = load_recipe(write_llm_recipe(tmp_path, "d", LLM))
    assert kind_of(decoder) is DECODER and KINDS[decoder.model.factory] is DECODER


def test_a_plain_module_adds_nothing_to_the_stages():
    recipe = load_recipe(ROOT / "recipes" / "mlp.yaml")
    assert MODULE.model_files(recipe) == [] and MODULE.emit_args(recipe) == (None, None)
    assert MODULE.emit_outputs(recipe, Path("tokenizer.json")) == [] and MODULE.emit_sections == ()
    assert not MODULE.searches(recipe)


def test_a_decoder_gives_its_constant_methods_and_searches_only_when_asked(tmp_path):
    plain = load_recipe(write_llm_recipe(tmp_path, "p", LLM, quantize={"scheme": "int8-dynamic"}))
    searched = load_recipe(write_llm_recipe(tmp_path, "s", LLM, quantize={"scheme": "int8-dynamic"},
                                            verify={"fallback": "auto", "agreement": 0.8}))
    methods, tokenizer = DECODER.emit_args(plain)
    assert methods["get_max_context_len"] == [32] and methods["get_max_seq_len"] == [4] and tokenizer is None
    assert DECODER.emit_sections == ("model",) and DECODER.emit_outputs(plain, Path("t.json")) == []
    assert (DECODER.searches(plain), DECODER.searches(searched)) == (False, True)
    assert (plain.verify.agreement, searched.verify.agreement, searched.verify.fallback) == (None, 0.8, "auto")


def test_every_function_a_kind_names_exists():
    refs = [value for kind in (MODULE, *KINDS.values()) for value in vars(kind).values() if isinstance(value, Ref)]
    assert refs and all(callable(ref.load()) for ref in refs)


def test_no_module_but_the_kinds_tells_models_apart_by_their_factory():
    """A branch on the factory (`model.factory ==`, `is_llm(...)`) outside etbuild/recipe/kinds.py is a kind's
    job done in generic code."""
    pattern = re.compile(r"model\.factory\s*[!=]=|\bis_llm\(|FACTORY\s*[!=]=|[!=]=\s*(LLM_)?FACTORY\b")
    allowed = {"etbuild/recipe/kinds.py", "etbuild/recipe/checks.py"}  # checks: the document, before a Recipe
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "etbuild").rglob("*.py"))
             if p.relative_to(ROOT).as_posix() not in allowed
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, "branches on the model's factory outside etbuild/recipe/kinds.py:\n" + "\n".join(found)
