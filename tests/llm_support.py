"""Tiny language-model checkpoints and tokenizers for the `model.llm` tests: made here, nothing downloaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from etbuild.llm.checkpoint import make_model

TINY: dict[str, Any] = {
    "architecture": "LlamaForCausalLM", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
    "bos_token_id": 1, "eos_token_id": 2,
}
"""Hidden 64, 2 layers, vocabulary 256, grouped-query attention (4 heads, 2 KV heads)."""

_SHAPE = {key: value for key, value in TINY.items() if key != "architecture"}
FAMILIES: dict[str, dict[str, Any]] = {
    "llama3": {**TINY, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    "qwen2": {"architecture": "Qwen2ForCausalLM", **_SHAPE, "tie_word_embeddings": True},
    "qwen3": {"architecture": "Qwen3ForCausalLM", **_SHAPE, "head_dim": 16, "tie_word_embeddings": True},
    "mistral": {"architecture": "MistralForCausalLM", **_SHAPE, "sliding_window": None},
    "phi3": {"architecture": "Phi3ForCausalLM", **_SHAPE, "pad_token_id": 0},
    "gemma": {"architecture": "GemmaForCausalLM", **_SHAPE, "num_key_value_heads": 1, "head_dim": 16},
}
"""One tiny config of each architecture model.llm takes, with what its family has (RoPE scaling, tied
embeddings, q/k norms, multi-query attention)."""

PROMPT = [5, 9, 17, 33, 2, 8]


def save_checkpoint(folder: Path, config: dict[str, Any] = TINY, seed: int = 0, shard: str | None = None) -> Path:
    """`save_pretrained` of a random model of `config` into `folder` (sharded at `shard`, e.g. '20KB')."""
    model = make_model(config, seed)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **kwargs)
    return folder


def train_tokenizer(folder: Path, vocab: int = 160) -> int:
    """A byte-level BPE `folder/tokenizer.json` of at most `vocab` tokens trained on a fixed ASCII text; its size.

    Its alphabet is the bytes of that text only, so every token decodes to ASCII: a random model's
    tokens are then always valid UTF-8 text (ExecuTorch's runner hands each piece to Python as str)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"])
    text = ["the quick brown fox jumps over the lazy dog " * 8, "a recipe builds a program for a device " * 8]
    tokenizer.train_from_iterator(text, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return int(tokenizer.get_vocab_size(with_added_tokens=True))


def write_llm_recipe(root: Path, name: str, model_llm: dict[str, Any], **sections: Any) -> Path:
    """A recipe file `root/<name>.yaml` with `model.llm: model_llm` and the other sections given."""
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "model": {"llm": model_llm}, **sections}, sort_keys=False))
    return path


def greedy(forward: Callable[..., list[Any]], prompt: list[int], tokens: int) -> list[int]:
    """Greedy ids from a runner-contract `forward(tokens[1, n], input_pos[1])` of numpy arrays: the prompt
    in one call, then one token per call."""
    logits = forward(np.array([prompt], dtype=np.int64), np.array([0], dtype=np.int64))[0]
    out: list[int] = []
    for position in range(len(prompt), len(prompt) + tokens):
        out.append(int(np.asarray(logits).argmax()))
        logits = forward(np.array([[out[-1]]], dtype=np.int64), np.array([position], dtype=np.int64))[0]
    return out


GROUPED_CALLS = [[5], [9, 17, 33], [2], [8], [40, 41], [7], [11]]
"""Runner-contract calls at consecutive positions for `hf_logits_gap`: one token at position 0 (before TINY's
G - 1 = 1, so the plain call), chunks, then single tokens (grouped-query attention's rows)."""


def hf_logits_gap(forward: Callable[..., list[Any]], model: torch.nn.Module, calls: list[list[int]]) -> float:
    """The largest difference between the logits of a runner-contract `forward` fed `calls` (token lists at
    consecutive positions from 0) and those of Hugging Face's forward over the whole sequence so far."""
    sequence: list[int] = []
    gap = 0.0
    for tokens in calls:
        logits = forward(np.array([tokens], dtype=np.int64), np.array([len(sequence)], dtype=np.int64))[0]
        sequence += tokens
        with torch.no_grad():
            expected = model(torch.tensor([sequence])).logits[0, -1].numpy()
        gap = max(gap, float(np.abs(np.asarray(logits).reshape(-1) - expected).max()))
    return gap


def hf_greedy(model: torch.nn.Module, prompt: list[int], tokens: int) -> list[int]:
    """Hugging Face `generate(do_sample=False)`: the `tokens` ids after `prompt`."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    return [int(t) for t in out[0, len(prompt):]]


def build_verified(root: Path, attention: str) -> tuple[Path, Path]:
    """Build a tiny Llama folder (random weights, a trained tokenizer) with `llm.attention: attention`,
    asserting verify's own token check passed in both runtimes: (.pte, folder)."""
    import io
    import json

    from etbuild.build.driver import build

    size = train_tokenizer(root / "ckpt")
    save_checkpoint(root / "ckpt", {**TINY, "vocab_size": size})
    recipe = write_llm_recipe(root, "tiny", {"path": "ckpt", "max_context": 64, "max_prefill": 16},
                              llm={"attention": attention})
    result = build([recipe], root / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    report = json.loads((root / "build" / "tiny" / "verify.json").read_text())
    assert report["passed"]
    for check in (report["llm"], report["llm"]["executorch"]):
        assert (check["matched"], check["tokens"], check["passed"]) == (32, 32, True)
    return root / "build" / "tiny" / "tiny.pte", root / "ckpt"
