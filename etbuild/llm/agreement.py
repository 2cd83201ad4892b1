"""Teacher-forced next-token agreement of a language model against its float model.

A sequence of `POSITIONS` token ids (fewer for a short cache), drawn uniformly from the vocabulary by a
seeded torch generator, is fed one token a call from position 0, as a runner decodes, so the KV cache carries
the sequence; after each call the argmax of the logits is the model's next token. `agreement` is the share of
positions whose argmax equals the float model's, with the logits' SNR against it. Verify judges a quantized
program on the sequence `verify.seed` draws (`etbuild.verify.llm`); the quantize stage's agreement search
(`etbuild.llm.fallback`) measures on another one, `SEARCH_SEED` + `verify.seed`, so that what it chooses is not
fitted to the sequence that judges it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from etbuild.recipe import Recipe
from etbuild.recipe.llm import vocab_size

POSITIONS = 128
AGREEMENT = 0.9
"""`verify.agreement` when the recipe does not say."""
SEARCH_SEED = 2_000_003
"""Added to `verify.seed` for the search's sequence: never verify's (nor calibration's, `GENERATED_SEED`)."""

Samples = list[tuple[np.ndarray, np.ndarray]]


def random_sequence(vocab: int, length: int, generator: torch.Generator) -> list[int]:
    """`length` ids drawn uniformly from `[0, vocab)`."""
    return torch.randint(0, vocab, (length,), generator=generator).tolist()


def search_sequence(recipe: Recipe) -> list[int]:
    """The agreement search's sequence: `POSITIONS` ids (at most `max_context` - 1) drawn with `SEARCH_SEED` +
    `verify.seed`.

    One short of a cache of `POSITIONS` or fewer: the search runs the exported graph in torch, and an int8-cache
    model's graph asserts a start position below `max_context` - 1 (export takes a token count of at least 2;
    its program, which verify runs, takes the last position too)."""
    generator = torch.Generator().manual_seed(SEARCH_SEED + recipe.verify.seed)
    length = min(POSITIONS, int(recipe.model.kwargs["max_context"]) - 1)
    return random_sequence(vocab_size(recipe.model.kwargs), length, generator)


def threshold(recipe: Recipe) -> float:
    """The recipe's `verify.agreement` (default `AGREEMENT`)."""
    return AGREEMENT if recipe.verify.agreement is None else recipe.verify.agreement


def one_token_calls(sequence: list[int]) -> Samples:
    """The `(tokens[1, 1], input_pos[1])` calls that feed `sequence` from position 0."""
    return [(np.array([[t]], dtype=np.int64), np.array([i], dtype=np.int64)) for i, t in enumerate(sequence)]


def float_model(model: torch.nn.Module) -> torch.nn.Module:
    """The float model of a recipe's `model` (with a float KV cache: an int8-cache program is judged against it)."""
    return model.with_float_cache() if getattr(model, "int8_cache", False) else model


def teacher_forced(model: Any, samples: Samples) -> np.ndarray:
    """The logits after each call of `samples`, in order, one row per position (`model` keeps its state)."""
    with torch.no_grad():
        return np.stack([model(*map(torch.from_numpy, s)).numpy().reshape(-1) for s in samples])


def agreement(actual: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """Next-token agreement of the argmaxes and the SNR of `actual` against `reference`, over all positions."""
    noise = float(np.sum((actual.astype(np.float64) - reference) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    snr = float("inf") if noise == 0 else 10 * np.log10(signal / noise)
    share = float(np.mean(actual.argmax(-1) == reference.argmax(-1)))
    return {"positions": len(actual), "agreement": round(share, 4), "snr_db": round(snr, 2)}
