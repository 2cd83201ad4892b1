"""Greedy generation with a language-model program: prefill the prompt, then decode token by token.

The program has two methods that share its KV cache (recipes/lm.yaml, docs/llm.md):
`prefill(tokens)` takes the prompt, (1, n) int64, at positions 0..n-1, and `decode(token, pos)`
one (1, 1) int64 token at position `pos`, (1,) int64; each returns the (1, vocab) logits of the
next token, whose argmax greedy generation takes. Torch-free: the methods are any callables of
numpy arrays that return a list of outputs, from etbuild's runtime (`generate`) or another one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.errors import MethodInputError
from etbuild.tools.runner import check_token_ids

Step = Callable[..., Sequence[Any]]


def greedy(prefill: Step, decode: Step, prompt: Sequence[int], count: int, vocab_size: int | None = None) -> list[int]:
    """The `count` tokens that follow `prompt`, each the argmax of the logits before it. Prompt ids outside
    [0, vocab_size) are a MethodInputError (below 0 when the size is not given)."""
    if not prompt:
        raise MethodInputError("the prompt is empty: prefill needs at least one token")
    check_token_ids(prompt, vocab_size)
    if count < 1:
        return []
    tokens = [_next(prefill(np.asarray([prompt], dtype=np.int64)))]
    for pos in range(len(prompt), len(prompt) + count - 1):
        tokens.append(_next(decode(np.asarray([[tokens[-1]]], dtype=np.int64), np.asarray([pos], dtype=np.int64))))
    return tokens


def _next(outputs: Sequence[Any]) -> int:
    """The argmax of the last dimension of the first output (the logits), as a token id."""
    logits = np.asarray(outputs[0])
    return int(np.argmax(logits.reshape(-1, logits.shape[-1])[-1]))


def generate(pte: str | Path, prompt: Sequence[int], count: int, data: Sequence[Path] = ()) -> list[int]:
    """Greedy generation with the `.pte` (and its `.ptd` files `data`) in etbuild's runtime (both methods loaded
    before the first call)."""
    from etbuild.runtime import Program

    program = Program.load(pte, data)
    prefill, decode = program.load_method("prefill"), program.load_method("decode")
    return greedy(prefill, decode, prompt, count, logits_width(program.plan("decode")))


def logits_width(plan: Any) -> int | None:
    """The last dimension of an execution plan's first output (a language model's vocabulary), if it is a tensor."""
    value = plan.values[plan.outputs[0]].val if plan.outputs else None
    sizes = getattr(value, "sizes", None)
    return int(sizes[-1]) if sizes else None
