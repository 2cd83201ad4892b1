"""`model.llm`: a decoder-only language model, expanded into the model section the stages read.

Runs before validation. `model.llm` (a Hugging Face folder `path`, or a `config` with an
`architecture`, plus `max_context` and `max_prefill`) and the top-level `llm` section
(`attention`, `kv_cache`, `metadata`) become `model.factory: etbuild.llm.runner:decoder` with
them as `kwargs`, and the runner contract's inputs: `tokens` `[1, n]` int64 with `n` dynamic in
[1, max_prefill] (static `[1, 1]` when `max_prefill` is 1: backends that take only static shapes,
XNNPACK here, then take the whole model, and the runner prefills token by token), and
`input_pos` `[1]` int64. Each added key is located at `model.llm`. The
schema then checks the rest; what it cannot say (an architecture outside the list, a folder
without config.json, `max_prefill` past `max_context`, a transformers release outside
`etbuild.recipe.llm_versions.SUPPORTED`) is a RecipeError here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from etbuild.recipe import llm_versions
from etbuild.recipe.checks import INT4_SCHEME, LLM_FACTORY, STATIC_SCHEME, override_schemes
from etbuild.recipe.llm_architectures import unsupported
from etbuild.recipe.parse import Doc
from etbuild.recipe.places import KeyPath, located_error

FACTORY = LLM_FACTORY  # written in checks, which tells language models apart before Recipe exists
MODEL_KEYS = ("factory", "kwargs", "weights", "inputs", "methods", "dynamic")
"""Keys that `model.llm` gives; a recipe with `model.llm` sets none of them."""


def expand_llm(doc: Doc) -> None:
    """Turn `model.llm` (and `llm`) into model.factory, kwargs, inputs and dynamic, in place."""
    model = doc.data.get("model")
    if not isinstance(model, dict) or "llm" not in model:
        if "llm" in doc.data:
            raise _error(doc, ("llm",), "expected model.llm beside an llm section; the model has none")
        return
    llm = model["llm"]
    if not isinstance(llm, dict):
        raise _error(doc, ("model", "llm"), "expected a mapping with path or config, max_context, max_prefill")
    for key in MODEL_KEYS:
        if key in model:
            raise _error(doc, ("model", key), f"expected no model.{key} beside model.llm (it gives the model)")
    problem = llm_versions.problem(llm_versions.installed())
    if problem:
        raise _error(doc, ("model", "llm"), problem)
    kwargs = {**_source(doc, llm), **_lengths(doc, llm), **_section(doc)}
    vocab = vocab_size(kwargs)
    added: dict[str, Any] = {
        "factory": FACTORY,
        "kwargs": kwargs,
        "inputs": [{"shape": [1, min(kwargs["max_prefill"], 2)], "dtype": "int64", "low": 0, "high": vocab},
                   {"shape": [1], "dtype": "int64", "low": 0, "high": 1}],
    }
    if kwargs["max_prefill"] > 1:  # else one token a call, static shapes (the runner prefills token by token)
        added["dynamic"] = {"0": {"1": {"min": 1, "max": kwargs["max_prefill"]}}}
    where = doc.where(("model", "llm"))
    for key, value in added.items():
        model[key] = value
        _locate(doc, ("model", key), value, where)
    del model["llm"]
    doc.data.pop("llm", None)
    _default_weights(doc)
    _calibration_text(doc, kwargs["path"])


LLM_WEIGHTS = "gptq"
"""How a language model's int4 linears are quantized when its recipe does not say (`quantize.weights`):
GPTQ on its calibration sequences lifted the logits' SNR of every architecture measured (docs/llm.md);
other models keep the schema's default, rounding, as their default calibration is random inputs."""


def _default_weights(doc: Doc) -> None:
    quantize = doc.data.get("quantize")
    if isinstance(quantize, dict) and quantize.get("scheme") == INT4_SCHEME and "weights" not in quantize:
        quantize["weights"] = LLM_WEIGHTS
        doc.values[("quantize", "weights")] = doc.where(("quantize", "scheme"))


DEFAULT_TEXT = Path(__file__).resolve().parents[1] / "llm" / "calibration_corpus.txt"
"""What a language model with a tokenizer calibrates on when `quantize.calibration.text` is absent (null: seeded
random ids): about 36 KB of this repository's own prose and Python (docs and source), enough for 32 sequences of 128
tokens with a vocabulary of a few thousand or more."""
TEXT = ("quantize", "calibration", "text")


def _calibration_text(doc: Doc, folder: str | None) -> None:
    """Default `quantize.calibration.text` to DEFAULT_TEXT when the model has a tokenizer.json and the quantization
    reads its calibration (int8-static, or gptq int4 linears); a text without a tokenizer to read it is an error."""
    quantize = doc.data.get("quantize")
    calibration = quantize.get("calibration", {}) if isinstance(quantize, dict) else None
    if not isinstance(calibration, dict):
        return
    tokenizer = folder is not None and (Path(folder) / "tokenizer.json").is_file()
    if calibration.get("text") is not None and not tokenizer:
        raise _error(doc, TEXT, "expected a tokenizer.json in model.llm.path to tokenize the calibration text; "
                                "the model has none")
    schemes = {quantize.get("scheme"), *(scheme for _, scheme in override_schemes(quantize))}
    reads = STATIC_SCHEME in schemes or (INT4_SCHEME in schemes and quantize.get("weights") == LLM_WEIGHTS)
    if not tokenizer or not reads or "text" in calibration or calibration.get("data") is not None:
        return
    where = doc.where(("quantize",))
    if "calibration" not in quantize:
        quantize["calibration"] = calibration
        doc.values[TEXT[:2]] = where
    calibration["text"] = DEFAULT_TEXT.as_posix()
    doc.values[TEXT] = where


def _source(doc: Doc, llm: dict[str, Any]) -> dict[str, Any]:
    """`path` (absolute) or `config`, exactly one."""
    if ("path" in llm) == ("config" in llm):
        raise _error(doc, ("model", "llm"), "expected exactly one of path (a Hugging Face folder) and config")
    if "config" in llm:
        config = llm["config"]
        if not isinstance(config, dict) or "architecture" not in config:
            raise _error(doc, ("model", "llm", "config"), "expected a mapping with an architecture and its fields")
        _check_architecture(doc, ("model", "llm", "config", "architecture"), config["architecture"])
        return {"path": None, "config": config}
    if not isinstance(llm["path"], str):
        raise _error(doc, ("model", "llm", "path"), f"expected a folder path; got {llm['path']!r}")
    naming = doc.files[doc.where(("model", "llm", "path")).file]
    folder = (naming.parent / llm["path"]).resolve()
    if not (folder / "config.json").is_file():
        message = f"expected a Hugging Face folder with config.json; {folder} has none"
        raise _error(doc, ("model", "llm", "path"), message)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _error(doc, ("model", "llm", "path"), f"{folder / 'config.json'} is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise _error(doc, ("model", "llm", "path"), f"expected a mapping in {folder / 'config.json'}")
    names = config.get("architectures") or [None]
    _check_architecture(doc, ("model", "llm", "path"), names[0])
    return {"path": folder.as_posix(), "config": None}


def _check_architecture(doc: Doc, path: KeyPath, name: object) -> None:
    problem = unsupported(name)
    if problem:
        raise _error(doc, path, f"unsupported architecture: {problem}")


def _lengths(doc: Doc, llm: dict[str, Any]) -> dict[str, int]:
    """`max_context` ≥ 2 and 1 ≤ `max_prefill` ≤ `max_context`."""
    lengths = {}
    for key, default, low in (("max_context", 128, 2), ("max_prefill", 32, 1)):
        value = llm.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise _error(doc, ("model", "llm", key), f"expected an integer >= {low}; got {value!r}")
        lengths[key] = value
    if lengths["max_prefill"] > lengths["max_context"]:
        message = f"expected at most max_context ({lengths['max_context']}); got {lengths['max_prefill']}"
        raise _error(doc, ("model", "llm", "max_prefill"), message)
    unknown = sorted(set(llm) - {"path", "config", "max_context", "max_prefill"})
    if unknown:
        raise _error(doc, ("model", "llm", unknown[0]), "unknown key; expected path, config, max_context, max_prefill")
    return lengths


SECTION = {"attention": ("portable", "custom"), "kv_cache": ("float32", "int8")}
"""Accepted values: attention `custom` calls ExecuTorch's llama:: operators; kv_cache `int8` (per token) needs it."""


def _section(doc: Doc) -> dict[str, Any]:
    """The top-level `llm` section: attention, kv_cache, metadata (bos, eos)."""
    section = doc.data.get("llm", {})
    if not isinstance(section, dict):
        raise _error(doc, ("llm",), "expected a mapping with attention, kv_cache, metadata")
    out: dict[str, Any] = {"attention": "portable", "kv_cache": "float32", "metadata": {}}
    for key, value in section.items():
        if key in SECTION and value not in SECTION[key]:
            message = f"expected {' or '.join(SECTION[key])}; got {value!r}"
            raise _error(doc, ("llm", key), message)
        if key == "metadata" and not (isinstance(value, dict) and set(value) <= {"bos", "eos"}):
            raise _error(doc, ("llm", key), "expected a mapping with bos (an id) and eos (a list of ids)")
        if key not in out:
            raise _error(doc, ("llm", key), "unknown key; expected attention, kv_cache, metadata")
        out[key] = value
    if out["kv_cache"] == "int8" and out["attention"] != "custom":
        message = "expected llm.attention: custom beside it (the int8 cache is written with llama::update_cache)"
        raise _error(doc, ("llm", "kv_cache"), message)
    return out


def vocab_size(kwargs: Mapping[str, Any]) -> int:
    """The vocabulary size, to bound random token ids (2 when the config does not say)."""
    config = kwargs["config"]
    if config is None:
        config = json.loads((Path(kwargs["path"]) / "config.json").read_text())
    vocab = config.get("vocab_size") if isinstance(config, Mapping) else None
    return vocab if isinstance(vocab, int) and vocab >= 2 else 2


def _locate(doc: Doc, path: KeyPath, value: Any, where: Any) -> None:
    doc.values[path] = where
    if isinstance(value, dict):
        for key, item in value.items():
            _locate(doc, (*path, key), item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _locate(doc, (*path, index), item, where)


def _error(doc: Doc, path: KeyPath, message: str) -> Exception:
    return located_error(doc.where(path), path, message)
