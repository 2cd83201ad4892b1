"""etbuild.llm.calibration: a language model is calibrated on token sequences, fed as the runner feeds them."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer

from etbuild.build.stage_table import calibration_files
from etbuild.errors import RecipeError
from etbuild.llm.calibration import SEQUENCE, calibration_calls
from etbuild.quantize.calibration import calibration_inputs
from etbuild.recipe import load_recipe
from etbuild.recipe.llm import DEFAULT_TEXT
from tests.llm_support import TINY, save_checkpoint, train_tokenizer, write_llm_recipe

INT4 = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4", "weights": "gptq"}


def _recipe(tmp_path, llm, calibration=None):
    quantize = {**INT4, **({"calibration": calibration} if calibration else {})}
    return load_recipe(write_llm_recipe(tmp_path, "c", llm, quantize=quantize, backends=[{"name": "xnnpack"}]))


def test_generated_sequences_cover_the_vocabulary_in_chunks_of_max_prefill(tmp_path):
    recipe = _recipe(tmp_path, {"config": TINY, "max_context": 128, "max_prefill": 48}, {"samples": 3, "seed": 7})
    calls = calibration_inputs(recipe, "forward")
    assert [(tuple(t.shape), int(p)) for t, p in calls] == [((1, 48), 0), ((1, 48), 48), ((1, 32), 96)] * 3
    ids = torch.cat([t.reshape(-1) for t, _ in calls])
    assert ids.dtype == torch.int64 and len(ids) == 3 * SEQUENCE
    assert int(ids.min()) >= 0 and int(ids.max()) < TINY["vocab_size"] and len(set(ids.tolist())) > 200
    assert all(torch.equal(a[0], b[0]) for a, b in zip(calls, calibration_calls(recipe)))  # seeded
    verify = torch.randint(0, TINY["vocab_size"], (128,), generator=torch.Generator().manual_seed(0))
    assert not torch.equal(ids[:SEQUENCE], verify)  # never verify's sequence


def test_text_is_tokenized_with_the_model_tokenizer_and_cut_into_sequences(tmp_path):
    folder = save_checkpoint(tmp_path / "m")
    train_tokenizer(folder)
    text = "a recipe builds a program for a device; the quick brown fox jumps over the lazy dog. " * 20
    (tmp_path / "calib.txt").write_text(text)
    recipe = _recipe(tmp_path, {"path": str(folder), "max_context": 64, "max_prefill": 64},
                     {"text": "calib.txt", "samples": 2})
    calls = calibration_calls(recipe)
    expected = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids[:128]
    assert [int(p) for _, p in calls] == [0, 0]
    assert torch.cat([t.reshape(-1) for t, _ in calls]).tolist() == expected


@pytest.mark.parametrize(("text", "tokenizer", "message"), [
    (None, True, "c.yaml:13:5: quantize.calibration.text: expected a text file, or a glob matching text files; "
                 "got 'missing.txt' ({tmp}/missing.txt: no such file)"),
    ("some text", False, "quantize.calibration.text: expected a tokenizer.json in model.llm.path to tokenize"),
])
def test_bad_calibration_text_is_an_error_when_the_recipe_loads(tmp_path, text, tokenizer, message):
    folder = save_checkpoint(tmp_path / "m")
    if tokenizer:
        train_tokenizer(folder)
    if text is not None:
        (tmp_path / "missing.txt").write_text(text)
    with pytest.raises(RecipeError) as info:
        _recipe(tmp_path, {"path": str(folder), "max_context": 64, "max_prefill": 64}, {"text": "missing.txt"})
    assert message.format(tmp=tmp_path.resolve().as_posix()) in str(info.value)
    assert "c.yaml:" in str(info.value)


def test_a_glob_that_matches_nothing_is_a_recipe_error(tmp_path):
    folder = save_checkpoint(tmp_path / "m")
    train_tokenizer(folder)
    with pytest.raises(RecipeError, match=r"quantize.calibration.text: .*got 'corpus/\*\*/\*.txt' .*no such file"):
        _recipe(tmp_path, {"path": str(folder), "max_context": 64, "max_prefill": 64}, {"text": "corpus/**/*.txt"})


def test_text_without_tokens_is_a_recipe_error(tmp_path):
    folder = save_checkpoint(tmp_path / "m")
    train_tokenizer(folder)
    (tmp_path / "empty.txt").write_text("")
    recipe = _recipe(tmp_path, {"path": str(folder), "max_context": 64, "max_prefill": 64}, {"text": "empty.txt"})
    with pytest.raises(RecipeError, match="quantize.calibration.text: .*empty.txt: expected text to calibrate on"):
        calibration_calls(recipe)


def test_a_glob_reads_its_files_in_sorted_order_and_keys_the_stage_on_them(tmp_path):
    folder = save_checkpoint(tmp_path / "m")
    train_tokenizer(folder)
    texts = {"corpus/b/two.txt": "the lazy dog. " * 40, "corpus/a.txt": "the quick brown fox jumps. " * 30,
             "corpus/skip.md": "a recipe builds " * 50}
    for name, text in texts.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    recipe = _recipe(tmp_path, {"path": str(folder), "max_context": 64, "max_prefill": 64},
                     {"text": "corpus/**/*.txt", "samples": 4})
    files = [tmp_path.resolve() / "corpus/a.txt", tmp_path.resolve() / "corpus/b/two.txt"]
    assert list(recipe.quantize.calibration.text_files()) == files
    assert calibration_files(recipe) == files
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    expected = [i for f in files for i in tokenizer.encode(f.read_text()).ids][:4 * 64]
    assert torch.cat([t.reshape(-1) for t, _ in calibration_calls(recipe)]).tolist() == expected


def test_a_model_with_a_tokenizer_calibrates_on_the_shipped_corpus_by_default(tmp_path):
    folder = save_checkpoint(tmp_path / "m")
    train_tokenizer(folder)
    llm = {"path": str(folder), "max_context": 64, "max_prefill": 64}
    recipe = _recipe(tmp_path, llm)
    assert recipe.quantize.calibration.text == DEFAULT_TEXT and DEFAULT_TEXT.is_file()
    expected = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(DEFAULT_TEXT.read_text()).ids[:64]
    assert calibration_calls(recipe)[0][0].reshape(-1).tolist() == expected
    assert _recipe(tmp_path, llm, {"text": None}).quantize.calibration.text is None  # null: random ids
    rounded = load_recipe(write_llm_recipe(tmp_path, "r", llm, quantize={**INT4, "weights": "rounded"},
                                           backends=[{"name": "xnnpack"}]))
    assert rounded.quantize.calibration.text is None  # nothing reads calibration
    generated = _recipe(tmp_path, {"config": TINY, "max_context": 64, "max_prefill": 64})
    assert generated.quantize.calibration.text is None  # no tokenizer


def test_rounded_int4_linears_read_no_sequences(tmp_path):
    """Nothing reads calibration under a dynamic scheme with rounded weights: the recipe's plain samples run."""
    quantize = {**INT4, "weights": "rounded"}
    recipe = load_recipe(write_llm_recipe(tmp_path, "r", {"config": TINY, "max_context": 128, "max_prefill": 48},
                                          quantize=quantize, backends=[{"name": "xnnpack"}]))
    calls = calibration_inputs(recipe, "forward")
    assert len(calls) == recipe.quantize.calibration.samples  # not 32 sequences in chunks of max_prefill
    assert all(t.shape[1] <= 48 for t, _ in calls) and sum(t.shape[1] for t, _ in calls) < 32 * SEQUENCE
