"""The LM recipe built once per test module, and its eager greedy tokens (tests/etbuild/tools/test_generate.py,
interop)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import torch

from etbuild.build.driver import build
from etbuild.model import build_model
from etbuild.recipe import load_recipe
from etbuild.tools.generate import Step, greedy

LM_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "lm.yaml"
PROMPT = [17, 3, 250, 42, 99, 7, 128]
TOKENS = 32
MIN_MARGIN = 1e-3  # eager top-2 logit gap every greedy step keeps: the tokens are no coin toss


def build_lm(root: Path) -> Path:
    """Build and verify recipes/lm.yaml under `root`; the `.pte` path."""
    result = build([LM_RECIPE], root, stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    assert json.loads((root / "lm" / "verify.json").read_text())["passed"]
    return root / "lm" / "lm.pte"


def eager_steps() -> tuple[Step, Step, list[float]]:
    """prefill and decode of the recipe's eager model as numpy steps, and the top-2 gaps they saw."""
    model, gaps = build_model(load_recipe(LM_RECIPE)), []

    def step(name: str) -> Step:
        def call(*xs: np.ndarray) -> list[np.ndarray]:
            with torch.no_grad():
                logits = getattr(model, name)(*map(torch.from_numpy, xs)).numpy()
            top = np.sort(logits.reshape(-1))[-2:]
            gaps.append(float(top[1] - top[0]))
            return [logits]

        return call

    return step("prefill"), step("decode"), gaps


def eager_tokens() -> list[int]:
    """The eager model's greedy tokens after PROMPT; every step's decision clear by MIN_MARGIN."""
    prefill, decode, gaps = eager_steps()
    tokens = greedy(prefill, decode, PROMPT, TOKENS)
    assert min(gaps) > MIN_MARGIN, f"a near tie in the eager logits ({min(gaps):.2g}): pick another prompt"
    return tokens
