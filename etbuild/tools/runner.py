"""Text generation with a program that follows ExecuTorch's runner contract (../shared/LLM.md), torch-free.

The contract: `forward(tokens: int64[1, n], input_pos: int64[1]) -> float32[1, vocab]` gives the logits after the
last of n tokens placed at input_pos …, the KV cache is state inside the program, and constant methods
(`get_max_seq_len`, `get_max_context_len`, `get_bos_id`, `get_eos_ids`, `enable_dynamic_shape`, …) describe it.
`Runner` prefills a prompt in chunks of at most the method's bound on n, then decodes one token per call,
greedily or by temperature and top-p sampling (seeded), until an EOS id or the count; it times both phases as
ExecuTorch's runner reports them (tokens per second).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.errors import InvalidProgram, MethodInputError

Forward = Callable[..., Sequence[Any]]
CONSTANTS = ("get_max_seq_len", "get_max_context_len", "get_vocab_size", "get_bos_id", "get_eos_ids",
             "enable_dynamic_shape", "use_kv_cache")


@dataclass(frozen=True)
class Contract:
    """What a runner-contract program says of itself: its bounds and special token ids."""

    max_seq_len: int
    max_context_len: int
    chunk: int
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    vocab_size: int | None = None  # `get_vocab_size`, when the program has it


@dataclass
class Stats:
    """Token counts and wall times of one generation."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else float("nan")

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens after the first (which prefill's logits give) per second of decode calls."""
        steps = max(self.generated_tokens - 1, 0)
        return steps / self.decode_s if self.decode_s > 0 else float("nan")

    def summary(self) -> str:
        return (f"prompt {self.prompt_tokens} tokens, prefill {self.prefill_tokens_per_s:.1f} tok/s; "
                f"generated {self.generated_tokens} tokens, decode {self.decode_tokens_per_s:.1f} tok/s")


def is_runner_program(method_names: Sequence[str]) -> bool:
    """Whether a program has the runner contract's `forward` and `get_max_seq_len`."""
    return "forward" in method_names and "get_max_seq_len" in method_names


def read_contract(constants: dict[str, Any], chunk_bound: int) -> Contract:
    """The contract from the constant methods' values (name -> value; missing ones absent) and the bound on n of
    `forward`'s token input. InvalidProgram when a value is not what the contract says."""
    def integer(name: str, default: int | None = None) -> int | None:
        value = constants.get(name, default)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InvalidProgram(f"constant method {name} returns {value!r}; expected a non-negative Int")
        return value

    max_seq = integer("get_max_seq_len")
    if max_seq is None or max_seq < 1:
        raise InvalidProgram("a runner-contract program needs get_max_seq_len ≥ 1")
    context = integer("get_max_context_len", max_seq) or max_seq
    eos = constants.get("get_eos_ids", ())
    eos = (eos,) if isinstance(eos, int) and not isinstance(eos, bool) else tuple(eos or ())
    if not all(isinstance(e, int) for e in eos):
        raise InvalidProgram(f"constant method get_eos_ids returns {eos!r}; expected Ints")
    dynamic = constants.get("enable_dynamic_shape", chunk_bound > 1)
    chunk = max(1, min(chunk_bound, max_seq)) if dynamic else 1
    return Contract(max_seq, context, chunk, integer("get_bos_id"), tuple(int(e) for e in eos),
                    integer("get_vocab_size"))


def check_token_ids(tokens: Sequence[int], vocab_size: int | None) -> None:
    """MethodInputError for a token id below 0 or, when the vocabulary size is known, not below it: an id is never
    read from the end of the embedding table."""
    for i, token in enumerate(tokens):
        if token < 0 or (vocab_size is not None and token >= vocab_size):
            expected = "≥ 0" if vocab_size is None else f"0 … {vocab_size - 1} (a vocabulary of {vocab_size})"
            raise MethodInputError(f"token id {token} (position {i} of the tokens given) is out of range: "
                                   f"expected {expected}")


def sample(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """The next token: the argmax at temperature 0, else a draw from softmax(logits / temperature) restricted to
    the most likely tokens whose probabilities first sum to at least top_p."""
    logits = np.asarray(logits, dtype=np.float64).reshape(-1)
    if temperature <= 0:
        return int(np.argmax(logits))
    p = np.exp((logits - logits.max()) / temperature)
    p /= p.sum()
    if top_p < 1:
        order = np.argsort(-p, kind="stable")
        keep = order[: int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1]
        q = np.zeros_like(p)
        q[keep] = p[keep]
        p = q / q.sum()
    return int(rng.choice(p.size, p=p))


class Runner:
    """Prefill and decode with one program's `forward`; `position` is the next free cache position."""

    def __init__(self, forward: Forward, contract: Contract) -> None:
        self.forward, self.contract, self.position = forward, contract, 0
        self.stats = Stats()

    def feed(self, tokens: Sequence[int]) -> np.ndarray:
        """Run tokens at the next positions, in chunks of at most the contract's bound; the logits after the last."""
        if not tokens:
            raise MethodInputError("the prompt is empty: prefill needs at least one token")
        check_token_ids(tokens, self.contract.vocab_size)
        end = self.position + len(tokens)
        if end > self.contract.max_context_len:
            raise MethodInputError(f"{len(tokens)} tokens at position {self.position} reach position {end - 1}, "
                                   f"past the program's context of {self.contract.max_context_len} positions")
        logits = None
        for i in range(0, len(tokens), self.contract.chunk):
            chunk = np.asarray([tokens[i:i + self.contract.chunk]], dtype=np.int64)
            logits = self.forward(chunk, np.asarray([self.position], dtype=np.int64))[0]
            self.position += chunk.shape[1]
        return np.asarray(logits)

    def generate(self, prompt: Sequence[int], count: int, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int = 0) -> Iterator[int]:
        """Yield up to `count` tokens after `prompt`, stopping after an EOS id (which is yielded)."""
        rng = np.random.default_rng(seed)
        self.stats = Stats(prompt_tokens=len(prompt))
        start = time.perf_counter()
        logits = self.feed(prompt)
        self.stats.prefill_s = time.perf_counter() - start
        for k in range(count):
            token = sample(logits, temperature, top_p, rng)
            self.stats.generated_tokens += 1
            yield token
            if token in self.contract.eos_ids or k == count - 1:
                return
            start = time.perf_counter()
            logits = self.feed([token])
            self.stats.decode_s += time.perf_counter() - start


def load_runner(pte: Any, max_planned_bytes: int | None = None, data: Sequence[Path] = (), **options: Any) -> Runner:
    """A Runner on etbuild's runtime for the runner-contract `.pte` at `pte` (every method loaded first), its keys
    looked up in the `.ptd` files `data`; options: Program.load's numerics options (threads, blas, native), over
    those the environment gives (etbuild.runtime.runner.environment_options)."""
    from etbuild.runtime import Program
    from etbuild.runtime.format import program as fb
    from etbuild.runtime.runner import environment_options

    program = Program.load(pte, data, **{**environment_options(), **options})
    kwargs = {} if max_planned_bytes is None else {"max_planned_bytes": max_planned_bytes}
    forward = program.load_method("forward", **kwargs)
    constants = {name: program.load_method(name)()[0] for name in CONSTANTS if name in program.method_names}
    tokens = forward.plan.values[forward.plan.inputs[0]].val if forward.plan.inputs else None
    if not isinstance(tokens, fb.Tensor) or len(tokens.sizes) != 2:
        raise InvalidProgram(f"{pte}: forward's first input must be int64 tokens [1, n]")
    return Runner(forward, read_contract(constants, int(tokens.sizes[1])))


def phase_inputs(contract: Contract, prompt: int) -> dict[str, list[np.ndarray]]:
    """The inputs of `forward` in each phase of a generation: prefill (a `prompt`-token chunk, at most the
    contract's bound, at position 0) and decode (one token at the position after it); seeded token ids."""
    n = max(1, min(prompt, contract.chunk, contract.max_context_len - 1))
    tokens = np.random.default_rng(0).integers(3, 100, n + 1).astype(np.int64)
    return {f"prefill ({n} tokens at position 0)": [tokens[None, :n], np.asarray([0], np.int64)],
            f"decode (1 token at position {n})": [tokens[None, n:], np.asarray([n], np.int64)]}
