"""Verify for language models: tokens for float programs, next-token agreement for quantized ones.

A float program must give Hugging Face's `generate(do_sample=False)` tokens: the model's greedy
continuation (`verify.tokens`, default 32) of a fixed prompt is fed back one token a call
(teacher forcing on exactly the sequence greedy decoding sees), and the program's argmax after
each position must be the next greedy token; then free greedy generation gives the same tokens.
A quantized program (a quantized scheme, or an int8 KV cache) is judged against the float model
over a fixed random sequence of `POSITIONS` tokens (the cache length when shorter): the share of
positions whose argmax
agrees (`agreement`, gated by `verify.agreement`, default `AGREEMENT`) and the logits' SNR. The
calls run in order on one loaded method, in the runtime a `Runner` gives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from etbuild.model import build_model
from etbuild.recipe import Recipe

POSITIONS = 128
PROMPT = 8
TOKENS = 32
AGREEMENT = 0.9

Runner = Callable[[Path, Path, Path, str], None]
RunSamples = Callable[[Runner, Path, list[tuple[Any, ...]], str], list[list[np.ndarray]]]


def llm_check(recipe: Recipe, pte: Path, run: Runner, run_samples: RunSamples) -> dict[str, Any]:
    """The token check of a float program, or the agreement check of a quantized one, as a report."""
    kwargs, cfg = recipe.section("model")["kwargs"], recipe.section("verify")
    model = build_model(recipe)
    vocab = int(model.language_model().config.vocab_size)
    generator = torch.Generator().manual_seed(int(cfg["seed"]))
    exact = recipe.quantize is None and kwargs.get("kv_cache", "float32") == "float32"
    if exact:
        tokens = min(int(cfg.get("tokens", TOKENS)), kwargs["max_context"] - PROMPT)
        prompt = torch.randint(0, vocab, (PROMPT,), generator=generator).tolist()
        greedy = _hf_greedy(model.language_model(), prompt, tokens)
        sequence = prompt + greedy[:-1]
    else:
        sequence = torch.randint(0, vocab, (min(POSITIONS, kwargs["max_context"]),), generator=generator).tolist()
    samples = [(np.array([[t]], dtype=np.int64), np.array([i], dtype=np.int64)) for i, t in enumerate(sequence)]
    actual = np.stack([out[0].reshape(-1) for out in run_samples(run, pte, samples, "forward")])
    reference = _eager(_float_cache(build_model(recipe)), samples)
    report = _agreement(actual, reference)
    if exact:
        matched = [int(a) == g for a, g in zip(actual[PROMPT - 1:].argmax(-1), greedy)]
        report.update(greedy_tokens=greedy, matched=sum(matched), tokens=len(greedy), passed=all(matched))
    else:
        threshold = float(cfg.get("agreement", AGREEMENT))
        report.update(threshold=threshold, passed=report["agreement"] >= threshold)
    return report


def _float_cache(model: torch.nn.Module) -> torch.nn.Module:
    """The model with a float KV cache: an int8-cache program is judged against the float model."""
    return model.with_float_cache() if getattr(model, "int8_cache", False) else model


def _hf_greedy(model: torch.nn.Module, prompt: list[int], tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    return [int(t) for t in out[0, len(prompt):]]


def _eager(model: torch.nn.Module, samples: list[tuple[np.ndarray, ...]]) -> np.ndarray:
    with torch.no_grad():
        return np.stack([model(*map(torch.from_numpy, s)).numpy().reshape(-1) for s in samples])


def _agreement(actual: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """Next-token agreement of the argmaxes and the SNR of `actual` against `reference`, over all positions."""
    noise = float(np.sum((actual.astype(np.float64) - reference) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    snr = float("inf") if noise == 0 else 10 * np.log10(signal / noise)
    agreement = float(np.mean(actual.argmax(-1) == reference.argmax(-1)))
    return {"positions": len(actual), "agreement": round(agreement, 4), "snr_db": round(snr, 2)}
