"""`model.llm` programs in ExecuTorch's runtime and ours: Hugging Face's greedy tokens, its constant methods,
and ExecuTorch's TextLLMRunner generating text from our `.pte` and the tokenizer.json beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from etbuild.llm.runner import decoder
from etbuild.runtime import Program
from etbuild.verify.oracle import executorch_methods
from tests.conftest import HAS_EXECUTORCH
from tests.llm_support import PROMPT, build_verified, greedy, hf_greedy

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

TOKENS = 32


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny Llama folder built with portable attention, verified in both runtimes: (.pte, folder)."""
    return build_verified(tmp_path_factory.mktemp("llm"), "portable")


@pytest.fixture(scope="module")
def expected(built: tuple[Path, Path]) -> list[int]:
    return hf_greedy(decoder(path=str(built[1]), max_context=64, max_prefill=16).decoder.model, PROMPT, TOKENS)


def test_executorch_runtime_gives_hugging_face_greedy_tokens(built, expected):
    (forward,) = executorch_methods(built[0], "forward")
    assert greedy(forward, PROMPT, TOKENS) == expected


def test_our_runtime_gives_hugging_face_greedy_tokens(built, expected):
    forward = Program.load(built[0]).load_method("forward")
    assert greedy(forward, PROMPT, TOKENS) == expected


def test_constant_methods_are_what_the_runner_reads(built):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(built[0])
    values = {name: list(program.load_method(name).execute([])) for name in program.method_names if name != "forward"}
    assert values == {
        "get_max_seq_len": [16], "get_max_context_len": [64], "get_vocab_size": [json.loads(
            (built[1] / "config.json").read_text())["vocab_size"]], "get_n_layers": [2], "use_kv_cache": [True],
        "use_sdpa_with_kv_cache": [False], "enable_dynamic_shape": [True], "get_bos_id": [1], "get_eos_ids": [2],
    }
    assert (built[0].parent / "tokenizer.json").read_bytes() == (built[1] / "tokenizer.json").read_bytes()


def test_text_llm_runner_generates_hugging_face_text(built):
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    text = "the quick brown fox"
    tokenizer = Tokenizer.from_file(str(built[0].parent / "tokenizer.json"))
    runner = TextLLMRunner(str(built[0]), str(built[0].parent / "tokenizer.json"))
    pieces: list[str] = []
    stats: list[dict[str, float]] = []
    config = GenerationConfig(max_new_tokens=16, temperature=0.0, echo=False)
    runner.generate(text, config, token_callback=pieces.append,
                    stats_callback=lambda s: stats.append(json.loads(s.to_json_string())))
    reference = hf_greedy(decoder(path=str(built[1]), max_context=64, max_prefill=16).decoder.model,
                          tokenizer.encode(text).ids, 16)
    end = reference.index(2) + 1 if 2 in reference else len(reference)  # the runner stops at eos
    assert "".join(pieces) == tokenizer.decode(reference[:end], skip_special_tokens=False)
    assert stats[0]["prompt_tokens"] == len(tokenizer.encode(text).ids)
