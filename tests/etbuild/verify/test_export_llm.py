"""etbuild.verify.export_llm without running export_llm: the checkpoint it writes and the configuration it asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from etbuild.errors import UsageError
from etbuild.verify.export_llm import (
    PREQUANTIZED_MARKERS,
    LlamaShape,
    _neutral_checkpoint,
    export_config,
    write_checkpoint,
)

SHAPE = LlamaShape(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=50, hidden_dim=64)


def test_checkpoint_is_meta_layout_and_counts_its_parameters(tmp_path: Path) -> None:
    params, checkpoint = write_checkpoint(SHAPE, tmp_path)
    state = torch.load(checkpoint, weights_only=True)
    assert json.loads(params.read_text())["n_kv_heads"] == 2
    assert state["layers.1.attention.wk.weight"].shape == (16, 32)  # 2 kv heads of 8
    assert state["layers.0.feed_forward.w2.weight"].shape == (32, 64)
    assert sum(t.numel() for t in state.values()) == SHAPE.parameters
    (tmp_path / "again").mkdir()
    again = torch.load(write_checkpoint(SHAPE, tmp_path / "again")[1], weights_only=True)
    assert torch.equal(again["output.weight"], state["output.weight"])  # seeded


def test_config_asks_for_kv_cache_sdpa_and_xnnpack(tmp_path: Path) -> None:
    config = export_config(SHAPE, "8da4w", tmp_path / "p.json", tmp_path / "m.pth", tmp_path / "x.pte")
    assert config["model"] == {"use_kv_cache": True, "use_sdpa_with_kv_cache": True, "dtype_override": "fp32"}
    assert config["quantization"] == {"qmode": "8da4w", "group_size": 32, "embedding_quantize": "4,32"}
    assert json.loads(config["base"]["metadata"]) == {"get_bos_id": 1, "get_eos_ids": [2]}
    assert "quantization" not in export_config(SHAPE, "fp32", tmp_path, tmp_path, tmp_path / "x.pte")
    with pytest.raises(UsageError, match="export_llm form 'int3': expected one of fp32, 8da4w"):
        export_config(SHAPE, "int3", tmp_path, tmp_path, tmp_path / "x.pte")


def test_qwen3_layout_adds_per_head_q_and_k_norms(tmp_path: Path) -> None:
    shape = LlamaShape(dim=32, n_layers=1, n_heads=4, n_kv_heads=2, vocab_size=50, hidden_dim=64,
                       model_class="qwen3_0_6b", qk_norm=True)
    params, checkpoint = write_checkpoint(shape, tmp_path)
    state = torch.load(checkpoint, weights_only=True)
    assert state["layers.0.attention.q_norm_fn.weight"].shape == (8,)
    assert sum(t.numel() for t in state.values()) == shape.parameters
    assert json.loads(params.read_text())["use_qk_norm"] is True


def test_a_checkpoint_path_naming_a_quantized_form_is_given_through_a_neutral_link(tmp_path: Path) -> None:
    # export_llm reads a checkpoint path holding "8da4w" or "int8" as an already quantized checkpoint
    folder = tmp_path / "llama3_2-8da4w-0123"
    folder.mkdir()
    (folder / "meta.pth").write_bytes(b"weights")
    name, link = _neutral_checkpoint(folder / "meta.pth", folder)
    assert name == "checkpoint.pth" and link == folder / "checkpoint.pth"
    assert not any(marker in name for marker in PREQUANTIZED_MARKERS)
    assert link.read_bytes() == b"weights"
    plain = tmp_path / "plain" / "meta.pth"
    assert _neutral_checkpoint(plain, tmp_path) == (str(plain), None)
