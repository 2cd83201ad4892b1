"""`llm.kv_cache: int8`: the KV cache as int8 per token (with scales and zero points), in eager and our runtime."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.build.driver import build
from etbuild.llm.runner import decoder
from etbuild.pipeline import compile_module
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program
from tests.llm_support import PROMPT, TINY, save_checkpoint, train_tokenizer, write_llm_recipe

CONTEXT = 64


def _calls(length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A chunk of 8 tokens at position 0, then one token a call up to `length` (the cache's last position)."""
    sequence = torch.randint(0, TINY["vocab_size"], (length,), generator=torch.Generator().manual_seed(3))
    return [(sequence[None, :8], torch.tensor([0]))] + [(sequence[None, i:i + 1], torch.tensor([i]))
                                                         for i in range(8, length)]


def _eager(model: torch.nn.Module, calls: list[tuple[torch.Tensor, torch.Tensor]]) -> np.ndarray:
    with torch.no_grad():
        return np.stack([model(*call).numpy().reshape(-1) for call in calls])


def _int8(**kwargs: object) -> torch.nn.Module:
    return decoder(config=TINY, max_context=CONTEXT, max_prefill=16, attention="custom", kv_cache="int8", **kwargs)


def test_cache_is_int8_with_per_token_parameters_a_quarter_of_the_float_bytes():
    quantized, full = _int8(), decoder(config=TINY, max_context=CONTEXT, max_prefill=16, attention="custom")
    q_bytes, f_bytes = (sum(b.numel() * b.element_size() for name, b in m.named_buffers() if name.startswith(
        ("key_", "value_"))) for m in (quantized, full))
    assert quantized.key_cache_0.dtype == torch.int8 and quantized.key_cache_0.shape == (1, CONTEXT, 2, 16)
    assert quantized.key_scales_0.shape == quantized.key_zero_points_0.shape == (1, CONTEXT, 2, 1)
    token_heads = f_bytes // (16 * 4)  # head_dim 16, float32
    assert q_bytes == f_bytes // 4 + token_heads * 5  # int8 values; a float32 scale and an int8 zero point each


def test_eager_int8_cache_follows_the_float_model_to_the_cache_end():
    calls = _calls(CONTEXT)  # the last call writes the cache's last position
    full = _eager(decoder(config=TINY, max_context=CONTEXT, max_prefill=16, attention="custom"), calls)
    quantized = _eager(_int8(), calls)
    snr = 10 * np.log10(np.sum(full.astype(np.float64) ** 2) / np.sum((quantized - full).astype(np.float64) ** 2))
    assert snr > 40
    assert np.mean(full.argmax(-1) == quantized.argmax(-1)) >= 0.95


def test_first_chunk_attends_to_its_own_float_values():
    """At position 0 nothing is dequantized: the first chunk's logits are the float model's exactly."""
    call = _calls(16)[0]
    full = decoder(config=TINY, max_context=CONTEXT, max_prefill=16, attention="custom")
    torch.testing.assert_close(_eager(_int8(), [call]), _eager(full, [call]), rtol=0, atol=0)


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    inputs = (torch.tensor([PROMPT]), torch.tensor([0]))
    dynamic = ({1: torch.export.Dim("n", min=1, max=16)}, None)
    path = tmp_path_factory.mktemp("kv-int8") / "kv8.pte"
    path.write_bytes(compile_module(_int8(), inputs, dynamic_shapes=dynamic).pte)
    return path


def test_program_quantizes_per_token_and_dequantizes_the_filled_prefix(program):
    parsed, _ = read_program(program.read_bytes())
    names = {op.name for plan in parsed.execution_plan for op in plan.operators}
    assert {"quantized_decomposed::choose_qparams_per_token_asymmetric", "quantized_decomposed::quantize_per_token",
            "quantized_decomposed::dequantize_per_token", "llama::update_cache", "llama::custom_sdpa"} <= names
    assert "aten::copy_" not in names


def test_our_runtime_equals_the_eager_int8_model_to_the_cache_end(program):
    calls = _calls(CONTEXT)
    forward = Program.load(program).load_method("forward")
    actual = np.stack([forward(*(c.numpy() for c in call))[0].reshape(-1) for call in calls])
    np.testing.assert_allclose(actual, _eager(_int8(), calls), rtol=1e-4, atol=1e-4)


def test_a_position_past_the_cache_is_a_typed_error(program):
    from etbuild.errors import MethodInputError

    forward = Program.load(program).load_method("forward")
    with pytest.raises(MethodInputError, match="past the KV cache"):
        forward(np.array([[5, 6]], dtype=np.int64), np.array([CONTEXT - 1], dtype=np.int64))


def test_recipe_verifies_against_the_float_model(tmp_path):
    size = train_tokenizer(tmp_path / "ckpt")
    save_checkpoint(tmp_path / "ckpt", {**TINY, "vocab_size": size})
    recipe = write_llm_recipe(tmp_path, "kv8", {"path": "ckpt", "max_context": CONTEXT, "max_prefill": 16},
                              llm={"attention": "custom", "kv_cache": "int8"})
    result = build([recipe], tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    report = json.loads((tmp_path / "build" / "kv8" / "verify.json").read_text())["llm"]
    assert report["passed"] and report["positions"] == CONTEXT and report["agreement"] >= 0.9
    assert 40 < report["snr_db"] < 100  # judged against the float-cache model, not itself
    assert "matched" not in report  # an approximate program: agreement, not HF's greedy tokens
