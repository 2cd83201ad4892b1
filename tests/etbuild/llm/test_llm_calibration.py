"""etbuild.llm.calibration: a language model is calibrated on token sequences, fed as the runner feeds them."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer

from etbuild.errors import RecipeError
from etbuild.llm.calibration import SEQUENCE, calibration_calls
from etbuild.quantize.calibration import calibration_inputs
from etbuild.recipe import load_recipe
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
    (None, True, "quantize.calibration.text: calibration text {tmp}/missing.txt does not exist"),
    ("", True, "quantize.calibration.text: {tmp}/missing.txt: expected text to calibrate on; it gives no tokens"),
    ("some text", False, "quantize.calibration.text: expected a tokenizer.json in model.llm.path to tokenize"),
])
def test_bad_calibration_text_is_a_recipe_error(tmp_path, text, tokenizer, message):
    folder = save_checkpoint(tmp_path / "m")
    if tokenizer:
        train_tokenizer(folder)
    if text is not None:
        (tmp_path / "missing.txt").write_text(text)
    recipe = _recipe(tmp_path, {"path": str(folder), "max_context": 64, "max_prefill": 64},
                     {"text": "missing.txt"})
    with pytest.raises(RecipeError) as info:
        calibration_calls(recipe)
    assert message.format(tmp=tmp_path.resolve().as_posix()) in str(info.value)
    assert "c.yaml:" in str(info.value)


def test_rounded_int4_linears_read_no_sequences(tmp_path):
    """Nothing reads calibration under a dynamic scheme with rounded weights: the recipe's plain samples run."""
    quantize = {**INT4, "weights": "rounded"}
    recipe = load_recipe(write_llm_recipe(tmp_path, "r", {"config": TINY, "max_context": 128, "max_prefill": 48},
                                          quantize=quantize, backends=[{"name": "xnnpack"}]))
    calls = calibration_inputs(recipe, "forward")
    assert len(calls) == recipe.quantize.calibration.samples  # not 32 sequences in chunks of max_prefill
    assert all(t.shape[1] <= 48 for t, _ in calls) and sum(t.shape[1] for t, _ in calls) < 32 * SEQUENCE
