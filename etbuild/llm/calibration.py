"""The calibration inputs of a language model: token sequences, fed as the runner feeds a prompt.

The recipe's generic samples (random inputs of its declared shapes: two tokens at position 0) say nothing about a
decoder's activations over a context, which GPTQ's H and static ranges are made of. A language model is calibrated
on `quantize.calibration.samples` sequences of `SEQUENCE` tokens (at most `max_context`): the token ids of
`quantize.calibration.text` (UTF-8 files: a path or a glob, read in sorted order until they give enough tokens,
tokenized with the model folder's tokenizer.json, cut into consecutive sequences; fewer when the text runs out; a
recipe whose model has a tokenizer defaults to `etbuild.recipe.llm.DEFAULT_TEXT`), else ids drawn uniformly from the
vocabulary by a torch generator seeded with `GENERATED_SEED` + `calibration.seed` (not verify's sequence, which
verify.seed draws). Each sequence is fed in chunks of `max_prefill` tokens at their positions from 0, one call each,
so the KV cache carries the sequence as it does in the runner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from etbuild.recipe import CalibrationConfig, Recipe
from etbuild.recipe.llm import vocab_size

SEQUENCE = 128
"""Tokens per calibration sequence (fewer when the context is shorter)."""
GENERATED_SEED = 1_000_003
"""Added to `calibration.seed` for generated ids, so that they are never verify's sequence."""
TEXT_KEY = "quantize.calibration.text"


def calibration_calls(recipe: Recipe) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The `(tokens[1, n], input_pos[1])` calls that feed the calibration sequences, in order."""
    kwargs = recipe.model.kwargs
    cfg = recipe.quantize.calibration if recipe.quantize else None
    length = min(SEQUENCE, int(kwargs["max_context"]))
    count, seed = (cfg.samples, cfg.seed) if cfg else (1, 0)
    text = cfg is not None and cfg.text is not None
    sequences = _text(recipe, cfg, count, length) if text else _generated(kwargs, count, length, seed)
    chunk = int(kwargs["max_prefill"])
    return [(torch.tensor([sequence[start:start + chunk]], dtype=torch.int64), torch.tensor([start]))
            for sequence in sequences for start in range(0, len(sequence), chunk)]


def _generated(kwargs: Any, count: int, length: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(GENERATED_SEED + seed)
    return torch.randint(0, vocab_size(kwargs), (count, length), generator=generator).tolist()


def _text(recipe: Recipe, cfg: CalibrationConfig, count: int, length: int) -> list[list[int]]:
    """Up to `count` consecutive sequences of `length` ids of the text files (the last may be shorter)."""
    ids = _token_ids(recipe, cfg.text_files(), count * length)
    sequences = [ids[start:start + length] for start in range(0, len(ids), length)][:count]
    if not sequences:
        raise recipe.error(TEXT_KEY, f"{cfg.text}: expected text to calibrate on; it gives no tokens")
    return sequences


def _token_ids(recipe: Recipe, files: tuple[Path, ...], wanted: int) -> list[int]:
    """The ids of the files' text, in order, read until there are `wanted` of them (ids past the model's vocabulary
    dropped)."""
    folder = recipe.model.kwargs.get("path")
    tokenizer_json = Path(folder) / "tokenizer.json" if folder else None
    if tokenizer_json is None or not tokenizer_json.is_file():
        raise recipe.error(TEXT_KEY, "expected a tokenizer.json in model.llm.path to tokenize the calibration text; "
                                     "the model has none")
    from tokenizers import Tokenizer

    tokenizer, vocab = Tokenizer.from_file(str(tokenizer_json)), vocab_size(recipe.model.kwargs)
    ids: list[int] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise recipe.error(TEXT_KEY, f"calibration text {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise recipe.error(TEXT_KEY, f"cannot read {path} as UTF-8 text: {exc}") from None
        ids += [i for i in tokenizer.encode(text).ids if i < vocab]
        if len(ids) >= wanted:
            break
    return ids
