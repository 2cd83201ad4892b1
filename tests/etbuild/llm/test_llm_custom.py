"""`llm.attention: custom`: attention through `llama::update_cache` and `llama::custom_sdpa`, in our runtime.

The program writes the KV cache state in place (no `aten::copy_` of it) and attends over the filled
positions only, so a decode step costs the same at any `max_context`.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from etbuild.llm.runner import decoder
from etbuild.pipeline import compile_module
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program
from tests.llm_support import FAMILIES, GROUPED_CALLS, PROMPT, TINY, greedy, hf_greedy, hf_logits_gap

TOKENS = 32


def _compile(max_context: int, attention: str = "custom") -> bytes:
    model = decoder(config=TINY, max_context=max_context, max_prefill=16, attention=attention)
    inputs = (torch.tensor([PROMPT]), torch.tensor([0]))
    dynamic = ({1: torch.export.Dim("n", min=1, max=16)}, None)
    return compile_module(model, inputs, dynamic_shapes=dynamic).pte


@pytest.fixture(scope="module")
def pte() -> bytes:
    return _compile(64)


def _operators(data: bytes) -> list[str]:
    program, _ = read_program(data)
    return [op.name for plan in program.execution_plan for op in plan.operators]


def test_eager_custom_runner_gives_hugging_face_greedy_tokens():
    model = decoder(config=TINY, max_context=64, max_prefill=16, attention="custom")
    expected = hf_greedy(model.language_model(), PROMPT, TOKENS)
    with torch.no_grad():
        forward = lambda *xs: [model(*map(torch.from_numpy, xs)).numpy()]  # noqa: E731
        assert greedy(forward, PROMPT, TOKENS) == expected


def test_program_calls_the_llama_operators_and_copies_no_cache(pte):
    names = _operators(pte)
    assert {"llama::update_cache", "llama::custom_sdpa"} <= set(names)
    assert "aten::copy_" not in names and "aten::index_put" not in names


def test_our_runtime_gives_hugging_face_greedy_tokens(tmp_path, pte):
    path = tmp_path / "custom.pte"
    path.write_bytes(pte)
    expected = hf_greedy(decoder(config=TINY, max_context=64, max_prefill=16).language_model(), PROMPT, TOKENS)
    forward = Program.load(path).load_method("forward")
    assert greedy(forward, PROMPT, TOKENS) == expected


def _instructions(data: bytes) -> list[str]:
    """The forward's instructions: the operator of each kernel call, the kind of every other one."""
    program, _ = read_program(data)
    (plan,) = [p for p in program.execution_plan if p.name == "forward"]
    args = [i.instr_args for chain in plan.chains for i in chain.instructions]
    return [plan.operators[a.op_index].name if hasattr(a, "op_index") else type(a).__name__ for a in args]


def test_grouped_heads_attend_as_rows_of_one_call_for_one_token(tmp_path, pte):
    """TINY has 2 query heads per cache head: each layer's attention is a torch.cond between one call over
    the heads as rows (with the heads reordered there and back) and the plain causal call."""
    calls = _instructions(pte)
    layers = TINY["num_hidden_layers"]
    assert calls.count("llama::custom_sdpa") == 2 * layers
    assert calls.count("aten::index_select") == 2 * layers
    assert calls.count("JumpFalseCall") == 2 * layers
    path = tmp_path / "custom.pte"
    path.write_bytes(pte)
    model = decoder(config=TINY, max_context=64, max_prefill=16).language_model()
    assert hf_logits_gap(Program.load(path).load_method("forward"), model, GROUPED_CALLS) < 1e-4


def test_int8_caches_and_ungrouped_heads_take_the_plain_call():
    model = decoder(config={**TINY, "num_key_value_heads": TINY["num_attention_heads"]}, max_context=64,
                    max_prefill=16, attention="custom")
    inputs = (torch.tensor([PROMPT]), torch.tensor([0]))
    dynamic = ({1: torch.export.Dim("n", min=1, max=16)}, None)
    assert "JumpFalseCall" not in _instructions(compile_module(model, inputs, dynamic_shapes=dynamic).pte)
    int8 = decoder(config=TINY, max_context=64, max_prefill=16, attention="custom", kv_cache="int8")
    assert "JumpFalseCall" not in _instructions(compile_module(int8, inputs, dynamic_shapes=dynamic).pte)


def _decode_seconds(tmp_path, data: bytes, name: str, steps: int = 24) -> float:
    path = tmp_path / name
    path.write_bytes(data)
    forward = Program.load(path).load_method("forward")
    forward(np.array([PROMPT], dtype=np.int64), np.array([0], dtype=np.int64))
    best = float("inf")
    for position in range(len(PROMPT), len(PROMPT) + steps):
        start = time.perf_counter()
        forward(np.array([[7]], dtype=np.int64), np.array([position], dtype=np.int64))
        best = min(best, time.perf_counter() - start)
    return best


def test_decode_step_does_not_grow_with_the_context(tmp_path, pte):
    long = _compile(2048)
    assert len(_operators(long)) == len(_operators(pte))
    short_s, long_s = _decode_seconds(tmp_path, pte, "short.pte"), _decode_seconds(tmp_path, long, "long.pte")
    assert long_s < 1.5 * short_s, (short_s, long_s)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_architecture_gives_hugging_face_greedy_tokens_in_our_runtime(tmp_path, family):
    model = decoder(config=FAMILIES[family], max_context=32, max_prefill=8, attention="custom")
    expected = hf_greedy(model.language_model(), PROMPT, 8)
    dynamic = ({1: torch.export.Dim("n", min=1, max=8)}, None)
    path = tmp_path / f"{family}.pte"
    path.write_bytes(compile_module(model, (torch.tensor([PROMPT]), torch.tensor([0])), dynamic_shapes=dynamic).pte)
    assert greedy(Program.load(path).load_method("forward"), PROMPT, 8) == expected


def test_xnnpack_delegates_keep_each_attention_after_its_cache_update(tmp_path):
    """Partitioning reorders calls; the in-place cache writes must still come before the attention reading them."""
    from etbuild.recipe.config import BackendConfig

    model = decoder(config=TINY, max_context=64, max_prefill=1, attention="custom")
    expected = hf_greedy(model.language_model(), PROMPT, TOKENS)
    path = tmp_path / "xnnpack.pte"
    compiled = compile_module(model, (torch.tensor([[PROMPT[0]]]), torch.tensor([0])),
                              backends=[BackendConfig("xnnpack")])
    path.write_bytes(compiled.pte)
    assert "llama::update_cache" in _operators(compiled.pte)
    forward = Program.load(path).load_method("forward")
    sequence, got = list(PROMPT), []
    for position in range(len(PROMPT) + TOKENS - 1):
        logits = forward(np.array([[sequence[position]]], dtype=np.int64), np.array([position], dtype=np.int64))[0]
        if position >= len(PROMPT) - 1:
            got.append(int(np.asarray(logits).argmax()))
            sequence.append(got[-1])
    assert got == expected
