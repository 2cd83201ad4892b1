"""Verify for language models: tokens for float programs, next-token agreement for quantized ones.

A float program must give Hugging Face's `generate(do_sample=False)` tokens: the model's greedy
continuation (`verify.tokens`, default 32) of a fixed prompt is fed back one token a call
(teacher forcing on exactly the sequence greedy decoding sees), and the program's argmax after
each position must be the next greedy token; then free greedy generation gives the same tokens.
A quantized program (a quantized scheme, or an int8 KV cache) is judged against the float model
over a fixed random sequence of `POSITIONS` tokens (the cache length when shorter): the share of
positions whose argmax
agrees (`agreement`, gated by `verify.agreement`, default `etbuild.llm.agreement.AGREEMENT`) and the logits' SNR
(`etbuild.llm.agreement`). The calls run in order on one loaded method, in the runtime a `Runner` gives.
With `verify.fallback: auto`, `search_summary` adds what the quantize stage kept float to the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from etbuild.llm.agreement import (
    POSITIONS,
    agreement,
    float_model,
    one_token_calls,
    random_sequence,
    teacher_forced,
    threshold,
)
from etbuild.model import fresh
from etbuild.recipe import Recipe

__all__ = ["POSITIONS", "llm_check", "search_summary"]
PROMPT = 8
TOKENS = 32

Runner = Callable[[Path, Path, Path, str], None]
RunSamples = Callable[[Runner, Path, list[tuple[Any, ...]], str], list[list[np.ndarray]]]


def llm_check(recipe: Recipe, pte: Path, run: Runner, run_samples: RunSamples,
              built: torch.nn.Module) -> dict[str, Any]:
    """The token check of a float program, or the agreement check of a quantized one, as a report; `built` is the
    recipe's model as built (never run: each use runs a copy)."""
    kwargs, cfg = recipe.model.factory_kwargs(), recipe.verify
    model = fresh(built)
    vocab = int(model.language_model().config.vocab_size)
    generator = torch.Generator().manual_seed(cfg.seed)
    exact = recipe.quantize is None and kwargs.get("kv_cache", "float32") == "float32"
    if exact:
        tokens = min(TOKENS if cfg.tokens is None else cfg.tokens, kwargs["max_context"] - PROMPT)
        prompt = torch.randint(0, vocab, (PROMPT,), generator=generator).tolist()
        greedy = _hf_greedy(model.language_model(), prompt, tokens)
        sequence = prompt + greedy[:-1]
    else:
        sequence = random_sequence(vocab, min(POSITIONS, kwargs["max_context"]), generator)
    samples = one_token_calls(sequence)
    actual = np.stack([out[0].reshape(-1) for out in run_samples(run, pte, samples, "forward")])
    report = agreement(actual, teacher_forced(float_model(fresh(built)), samples))
    if exact:
        matched = [int(a) == g for a, g in zip(actual[PROMPT - 1:].argmax(-1), greedy)]
        report.update(greedy_tokens=greedy, matched=sum(matched), tokens=len(greedy), passed=all(matched))
    else:
        gate = threshold(recipe)
        report.update(threshold=gate, passed=report["agreement"] >= gate)
    return report


def _hf_greedy(model: torch.nn.Module, prompt: list[int], tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    return [int(t) for t in out[0, len(prompt):]]


def search_summary(layers: Path) -> dict[str, Any] | None:
    """What the quantize stage's agreement search (`verify.fallback: auto`) kept float, from its `layers.json`:
    the layers (node, module), the agreement and SNR before and after on the search's own sequence
    (None: no search ran)."""
    record = json.loads(layers.read_text())["methods"].get("forward", {}).get("agreement_search")
    if record is None:
        return None
    modules = {s["node"]: s["module"] for s in record.get("sensitivity", [])}
    return {"kept_float": [{"node": n, "module": modules.get(n, "")} for n in record["kept_float"]],
            "uniform": record["uniform"], "final": record["final"], "positions": record["positions"]}
