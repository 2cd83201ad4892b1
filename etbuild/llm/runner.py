"""The runner contract around a transformers decoder: `forward(tokens[1, n], input_pos[1])` → `[1, vocab]`.

The KV cache is transformers' `StaticCache` of `max_context` positions, registered as buffers
by `TorchExportableModuleWithStaticCache` (export makes the cache tensors it writes program state:
`etbuild.lowering.mutated_constants`). Tokens sit at positions `input_pos … input_pos + n - 1`;
the logits are those of the last. `constant_methods` gives the values of the methods the runner
reads at load (docs/llm.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from etbuild.llm import imports
from etbuild.llm.checkpoint import load_weights, make_model, read_config
from etbuild.llm.custom_attention import CustomRunner


class Runner(torch.nn.Module):
    """A decoder with a static KV cache, called as ExecuTorch's LLM runner calls a program."""

    def __init__(self, model: torch.nn.Module, max_context: int) -> None:
        super().__init__()
        imports.transformers()
        from transformers import GenerationConfig
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        model.generation_config = GenerationConfig(
            use_cache=True, cache_implementation="static", cache_config={"batch_size": 1, "max_cache_len": max_context})
        self.decoder = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=max_context)
        self.requires_grad_(False)

    def language_model(self) -> torch.nn.Module:
        """The transformers model inside (what `generate` runs on)."""
        return self.decoder.model

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        positions = input_pos + torch.arange(tokens.shape[1], dtype=torch.int64)
        return self.decoder(input_ids=tokens, cache_position=positions)[:, -1, :]


def decoder(path: str | None = None, config: Mapping[str, Any] | None = None, max_context: int = 128,
            max_prefill: int = 32, seed: int = 0, attention: str = "portable", kv_cache: str = "float32",
            **_: Any) -> torch.nn.Module:
    """The recipe factory of `model.llm`: the folder's model (or the config's, random from `seed`) as a Runner."""
    folder = None if path is None else Path(path)
    data = read_config(folder, config)
    model = make_model(data, seed)
    if folder is not None:
        load_weights(model, folder)
    check_tokenizer(folder, data)
    if attention == "custom":
        return CustomRunner(model, max_context, kv_cache).eval()
    return Runner(model, max_context).eval()


def check_tokenizer(folder: Path | None, data: Mapping[str, Any]) -> None:
    """A folder's tokenizer.json must not give ids past the model's vocabulary."""
    if folder is None or not (folder / "tokenizer.json").is_file():
        return
    from tokenizers import Tokenizer

    size = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    vocab = int(data.get("vocab_size", 0))
    if size > vocab:
        raise ValueError(f"{folder / 'tokenizer.json'} has {size} tokens; the model's vocabulary has {vocab}")


def tokenizer_file(kwargs: Mapping[str, Any]) -> Path | None:
    """The folder's tokenizer.json, if it has one."""
    file = None if kwargs.get("path") is None else Path(kwargs["path"]) / "tokenizer.json"
    return file if file is not None and file.is_file() else None


def checkpoint_files(kwargs: Mapping[str, Any]) -> list[Path]:
    """The files of a `model.llm` folder the build reads (its JSON files and safetensors shards), sorted."""
    if kwargs.get("path") is None:
        return []
    folder = Path(kwargs["path"])
    return sorted([*folder.glob("*.json"), *folder.glob("*.safetensors")])


def constant_methods(kwargs: Mapping[str, Any]) -> dict[str, list[int | bool]]:
    """The values of the runner's constant methods for a `model.llm` recipe's factory kwargs."""
    folder = None if kwargs.get("path") is None else Path(kwargs["path"])
    data = read_config(folder, kwargs.get("config"))
    bos, eos = _special_tokens(folder, data, kwargs.get("metadata") or {})
    values: dict[str, list[int | bool]] = {
        "get_max_seq_len": [kwargs["max_prefill"]],
        "get_max_context_len": [kwargs["max_context"]],
        "get_vocab_size": [int(data["vocab_size"])],
        "get_n_layers": [int(data["num_hidden_layers"])],
        "use_kv_cache": [True],
        "use_sdpa_with_kv_cache": [kwargs.get("attention") == "custom"],
        "enable_dynamic_shape": [kwargs["max_prefill"] > 1],
    }
    if bos is not None:
        values["get_bos_id"] = [bos]
    if eos:
        values["get_eos_ids"] = list(eos)
    return values


def _special_tokens(folder: Path | None, data: Mapping[str, Any],
                    metadata: Mapping[str, Any]) -> tuple[int | None, list[int]]:
    """bos and eos ids: the recipe's `llm.metadata`, else generation_config.json, else config.json."""
    sources: list[Mapping[str, Any]] = [{"bos_token_id": metadata.get("bos"), "eos_token_id": metadata.get("eos")}]
    if folder is not None and (folder / "generation_config.json").is_file():
        sources.append(json.loads((folder / "generation_config.json").read_text()))
    sources.append(data)
    bos = next((s["bos_token_id"] for s in sources if s.get("bos_token_id") is not None), None)
    eos = next((s["eos_token_id"] for s in sources if s.get("eos_token_id") is not None), [])
    return bos, [eos] if isinstance(eos, int) else list(eos)
