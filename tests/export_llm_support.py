"""The tiny export_llm programs the LLM runtime tests run (etbuild.verify.export_llm), built once per settings and
kept under the system's temp dir (ETBUILD_EXPORT_LLM_CACHE), so reruns take no export; and ExecuTorch's runtime's
view of the same program. The first build of each form takes about a minute: the tests that need one are `slow`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etbuild.verify.export_llm import LlamaShape

TINY = LlamaShape(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=320, hidden_dim=128, max_seq_len=160,
                  max_context_len=160, bos_id=1, eos_ids=(2,), seed=0)


def tiny_program(qmode: str) -> Path:
    """The `.pte` export_llm builds for TINY in form `qmode` (`fp32` or `8da4w`); skips without executorch."""
    pytest.importorskip("executorch.extension.llm.export.export_llm")
    from etbuild.verify.export_llm import export_llm

    return export_llm(TINY, qmode)


def executorch_forward(pte: Path):  # noqa: ANN201  (a callable of numpy arrays)
    """`forward` of `pte` in ExecuTorch's runtime, with its LLM and quantized kernels registered."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (the llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401  (quantized_decomposed::embedding_4bit)

    from etbuild.verify.oracle import executorch_methods

    return executorch_methods(pte, "forward")[0]


def token_sequence(count: int, seed: int = 0) -> list[int]:
    """A fixed random token sequence (ids 3 … vocab - 1: no BOS or EOS)."""
    return [int(t) for t in np.random.default_rng(seed).integers(3, TINY.vocab_size, count)]


CORPUS = ["the quick brown fox jumps over the lazy dog", "small language models run on small devices",
          "a runtime reads the program and calls its kernels", "prefill the prompt then decode one token at a time",
          "tokens per second on one thread of a busy machine", "pack my box with five dozen liquor jugs"]


def train_tokenizer(path: Path, vocab_size: int = TINY.vocab_size) -> Path:
    """A byte-level BPE trained on a few ASCII sentences (no download), written to `path` as tokenizer.json.

    Its ids 0, 1, 2 are `<pad>`, `<s>` and `</s>` (TINY's BOS and EOS); it learns only the corpus's characters and
    is padded with plain added tokens to exactly `vocab_size` ids, so every id a random model picks decodes to
    ASCII text (ExecuTorch's runner hands its callback each token as a UTF-8 string)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=[], show_progress=False)
    tokenizer.train_from_iterator(CORPUS * 8, trainer)
    missing = vocab_size - tokenizer.get_vocab_size()
    tokenizer.add_tokens([f"<w{i}>" for i in range(missing)])
    assert tokenizer.get_vocab_size() == vocab_size
    tokenizer.save(str(path))
    return path
