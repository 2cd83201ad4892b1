"""Read a Hugging Face folder or a recipe's config into a transformers model, strictly.

A folder holds config.json, one or more `*.safetensors` files (a sharded checkpoint is every
shard the folder holds) and usually tokenizer.json. Every tensor the model has must be in the
files, and every tensor in the files must be the model's; the only exception is the output head
of a model with tied embeddings, which is the embedding table. Errors are `ValueError`s naming
the file and the tensor; the factory turns them into recipe errors at `model.llm`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from etbuild.llm import imports
from etbuild.recipe.llm_architectures import ARCHITECTURES, unsupported

TIED_HEAD = "lm_head.weight"


def read_config(path: Path | None, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """config.json of the folder, or the recipe's config; `architecture` names the model class."""
    if path is not None:
        file = path / "config.json"
        if not file.is_file():
            raise ValueError(f"{path} has no config.json")
        data = json.loads(file.read_text())
        names = data.pop("architectures", None) or [None]
        data["architecture"] = names[0]
        for key in ("model_type", "transformers_version", "torch_dtype", "dtype"):
            data.pop(key, None)
    else:
        data = dict(config or {})
    problem = unsupported(data.get("architecture"))
    if problem:
        raise ValueError(f"architecture: {problem}")
    return data


def make_model(data: Mapping[str, Any], seed: int) -> torch.nn.Module:
    """The transformers model of `data` (float32, eval), its weights random from `seed`."""
    transformers = imports.transformers()
    fields = {key: value for key, value in data.items() if key != "architecture"}
    config = getattr(transformers, ARCHITECTURES[data["architecture"]])(**fields)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, data["architecture"])(config)
    return model.float().eval()


def load_weights(model: torch.nn.Module, folder: Path) -> None:
    """Load every `*.safetensors` file of `folder` into `model`; a missing or extra tensor is a ValueError."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder} has no *.safetensors file")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    expected = model.state_dict()
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    missing = [key for key in expected if key not in state and not (tied and key == TIED_HEAD)]
    extra = [key for key in state if key not in expected]
    if missing or extra:
        parts = ([f"missing tensor(s) {', '.join(missing)}"] if missing else []) + (
            [f"extra tensor(s) {', '.join(extra)}"] if extra else [])
        raise ValueError(f"the checkpoint in {folder} does not match the model: {'; '.join(parts)}")
    for key, value in state.items():
        if value.shape != expected[key].shape:
            raise ValueError(f"{folder}: tensor {key} has shape {list(value.shape)}, "
                             f"the model expects {list(expected[key].shape)}")
    model.load_state_dict({key: value.float() for key, value in state.items()}, strict=False)
    if tied:
        model.tie_weights()
