"""`llm.attention: custom` in ExecuTorch's runtime: its `llama::` kernels run our program to HF's greedy tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from etbuild.llm import custom_ops
from etbuild.llm.runner import decoder
from etbuild.verify.oracle import executorch_methods
from tests.conftest import HAS_EXECUTORCH
from tests.llm_support import GROUPED_CALLS, PROMPT, build_verified, greedy, hf_greedy, hf_logits_gap

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

TOKENS = 32


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny Llama folder built with custom attention, verified in both runtimes: (.pte, folder)."""
    paths = build_verified(tmp_path_factory.mktemp("llm-custom"), "custom")
    custom_ops.release()  # executorch's llama:: library registers its own operators and kernels
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401

    return paths


def _reference(folder: Path, prompt: list[int], tokens: int) -> list[int]:
    return hf_greedy(decoder(path=str(folder), max_context=64, max_prefill=16).language_model(), prompt, tokens)


def test_executorch_runtime_gives_hugging_face_greedy_tokens(built):
    (forward,) = executorch_methods(built[0], "forward")
    assert greedy(forward, PROMPT, TOKENS) == _reference(built[1], PROMPT, TOKENS)


def test_executorch_runtime_gives_hugging_face_logits_for_tokens_and_chunks(built):
    """Both branches of the grouped-query attention (one token as rows from position 1; chunks and position 0
    causal) in ExecuTorch's kernels."""
    (forward,) = executorch_methods(built[0], "forward")
    model = decoder(path=str(built[1]), max_context=64, max_prefill=16).language_model()
    assert hf_logits_gap(forward, model, GROUPED_CALLS) < 1e-4


def test_runner_reads_use_sdpa_with_kv_cache(built):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(built[0])
    assert list(program.load_method("use_sdpa_with_kv_cache").execute([])) == [True]


def test_text_llm_runner_generates_hugging_face_text(built):
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    text = "the quick brown fox"
    tokenizer = Tokenizer.from_file(str(built[0].parent / "tokenizer.json"))
    runner = TextLLMRunner(str(built[0]), str(built[0].parent / "tokenizer.json"))
    pieces: list[str] = []
    runner.generate(text, GenerationConfig(max_new_tokens=16, temperature=0.0, echo=False),
                    token_callback=pieces.append)
    reference = _reference(built[1], tokenizer.encode(text).ids, 16)
    end = reference.index(2) + 1 if 2 in reference else len(reference)  # the runner stops at eos
    assert "".join(pieces) == tokenizer.decode(reference[:end], skip_special_tokens=False)
