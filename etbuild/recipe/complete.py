"""Complete a validated document: fill defaults, normalise, build the frozen dataclasses.

Normalising turns sizes into integers, gives levels memory.alignment unless they set their
own, makes every file path absolute against the directory of the recipe file that names it
(a file factory, weights, calibration data, allowlist files), turns `operators.allow: file`
into the one entry `@file`, and `quantize.modules` into a list of `{module, scheme?, observer?}` in the
recipe's order (mapping keys are sorted everywhere else, so that sections serialise the same way).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

from etbuild.errors import InternalError
from etbuild.recipe.config import (
    SCHEMA,
    AccuracyConfig,
    BackendConfig,
    CalibrationConfig,
    DimRange,
    EmitConfig,
    FrozenMapping,
    InputSpec,
    LevelConfig,
    MemoryConfig,
    MethodSpec,
    ModelConfig,
    ModuleOverride,
    OperatorsConfig,
    QuantizeConfig,
    Recipe,
    RuleConfig,
    VerifyConfig,
    WeightsConfig,
    resolve,
)
from etbuild.recipe.parse import Doc
from etbuild.recipe.places import KeyPath, located_error

_SIZE = re.compile(r"([1-9][0-9]*) ?(B|KiB|MiB|GiB)")
_SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_FILE_FACTORY = re.compile(r"(?P<file>[^:]+\.py):(?P<attr>[^:]+)")


def complete(path: Path, doc: Doc) -> Recipe:
    """The Recipe of a validated, checked document."""
    data = _fill_defaults(copy.deepcopy(doc.data), SCHEMA)
    _normalize_memory(data["memory"])
    _normalize_files(data, doc)
    if data["quantize"] is not None:
        modules = data["quantize"]["modules"]
        data["quantize"]["modules"] = [{"module": glob, **(value if isinstance(value, dict) else {"scheme": value})}
                                       for glob, value in modules.items()]
    return _build(path, doc, _sorted(data))


def _fill_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Fill missing properties from the schema's `default`s, in place, recursively."""
    schema = resolve(schema)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key, sub in properties.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _fill_defaults(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):  # a mapping of named entries, such as model.methods
            for key in value.keys() - properties.keys():
                _fill_defaults(value[key], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _fill_defaults(item, schema["items"])
    return value


def _normalize_memory(memory: dict[str, Any]) -> None:
    """Sizes to integers ('unbounded' to None), level alignments inherited."""
    for level in memory["levels"]:
        if level["bytes"] == "unbounded":
            level["bytes"] = None
        elif isinstance(level["bytes"], str):
            level["bytes"] = parse_size(level["bytes"])
        if level["alignment"] is None:
            level["alignment"] = memory["alignment"]
    for rule in memory["rules"]:
        if isinstance(rule["max_bytes"], str):
            rule["max_bytes"] = parse_size(rule["max_bytes"])


def parse_size(text: str) -> int:
    """`"256KiB"` -> 262144 (the schema admits only strings that `_SIZE` matches)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise InternalError(f"size {text!r} passed the schema but does not parse")
    return int(match[1]) * _SIZE_UNITS[match[2]]


def _normalize_files(data: dict[str, Any], doc: Doc) -> None:
    """Every file path absolute, against the directory of the recipe file that names it."""
    model = data["model"]
    factory = _FILE_FACTORY.fullmatch(model["factory"])
    if factory:
        file = _absolute(doc, ("model", "factory"), factory["file"])
        model["factory"] = f"{file}:{factory['attr']}"
    if model["weights"] is not None:
        model["weights"] = _absolute(doc, ("model", "weights"), model["weights"])
    calibration = (data["quantize"] or {}).get("calibration", {})
    if calibration.get("data") is not None:
        calibration["data"] = _absolute(doc, ("quantize", "calibration", "data"), calibration["data"])
    if calibration.get("text") is not None:
        calibration["text"] = _text_pattern(doc, calibration["text"])
    _normalize_allow(data["operators"], doc)


def _text_pattern(doc: Doc, written: str) -> str:
    """`quantize.calibration.text` made absolute; it must name at least one file (a path, or a glob that matches)."""
    path = ("quantize", "calibration", "text")
    pattern = _absolute(doc, path, written)
    if not CalibrationConfig(text=Path(pattern)).text_files():
        message = f"expected a text file, or a glob matching text files; got '{written}' ({pattern}: no such file)"
        raise located_error(doc.where(path), path, message)
    return pattern


def _normalize_allow(operators: dict[str, Any], doc: Doc) -> None:
    """`allow: file` -> `["@/abs/file"]`; `@file` entries of a list made absolute."""
    allow, path = operators["allow"], ("operators", "allow")
    if isinstance(allow, str):
        operators["allow"] = [_allow_entry(doc, path, f"@{allow}")]
    elif allow is not None:
        operators["allow"] = [_allow_entry(doc, (*path, i), entry) for i, entry in enumerate(allow)]


def _allow_entry(doc: Doc, path: KeyPath, entry: str) -> str:
    """An allowlist entry, a `@file` one made absolute; the file must exist."""
    if not entry.startswith("@"):
        return entry
    written = entry[1:]
    file = _absolute(doc, path, written)
    if not Path(file).is_file():
        message = f"expected an existing allowlist file; got '{written}' ({file} not found)"
        raise located_error(doc.where(path), path, message)
    return f"@{file}"


def _absolute(doc: Doc, path: KeyPath, text: str) -> str:
    """`text`, a path written at `path`, made absolute against the directory of its file."""
    naming_file = doc.files[doc.values[path].file]
    return (naming_file.parent / text).resolve().as_posix()


def _sorted(value: Any) -> Any:
    """Plain data with every mapping's keys sorted, so that sections serialize the same way."""
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def _freeze(value: Any) -> Any:
    """Plain data made read-only and hashable: mappings become FrozenMapping, lists tuples."""
    if isinstance(value, dict):
        return FrozenMapping({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(item) for item in value)
    return value


# ---------------------------------------------------------------------------- the dataclasses


def _build(path: Path, doc: Doc, data: dict[str, Any]) -> Recipe:
    memory, verify, allow = data["memory"], data["verify"], data["operators"]["allow"]
    return Recipe(
        name=data["name"],
        path=path,
        model=_model(data["model"]),
        quantize=None if data["quantize"] is None else _quantize(data["quantize"]),
        backends=tuple(BackendConfig(b["name"], _freeze(b["options"])) for b in data["backends"]),
        memory=MemoryConfig(
            planner=memory["planner"],
            alignment=memory["alignment"],
            levels=tuple(LevelConfig(**level) for level in memory["levels"]),
            rules=tuple(RuleConfig(**rule) for rule in memory["rules"]),
        ),
        operators=OperatorsConfig(None if allow is None else tuple(allow)),
        verify=VerifyConfig(
            samples=verify["samples"], rtol=float(verify["rtol"]), atol=float(verify["atol"]), seed=verify["seed"],
            bundle=verify["bundle"], tokens=verify.get("tokens"),
            agreement=None if verify.get("agreement") is None else float(verify["agreement"]),
            fallback=verify.get("fallback", VerifyConfig.fallback),
        ),
        sources=tuple(doc.files.values()),
        locations=MappingProxyType({**doc.values, **doc.keys}),
        _data=MappingProxyType(data),
        emit=_emit(data["name"], data["emit"]),
    )


def _emit(name: str, emit: dict[str, Any]) -> EmitConfig:
    """`emit.weights`: inside → None; external → `<recipe>.ptd` with every key; a mapping → its file and globs."""
    weights = emit["weights"]
    if weights == "inside":
        return EmitConfig()
    if weights == "external":
        return EmitConfig(WeightsConfig(name))
    only = weights.get("only")
    return EmitConfig(WeightsConfig(weights["file"], None if only is None else tuple(only)))


def _model(model: dict[str, Any]) -> ModelConfig:
    return ModelConfig(
        factory=model["factory"],
        kwargs=_freeze(model["kwargs"]),
        weights=None if model["weights"] is None else Path(model["weights"]),
        seed=model["seed"],
        methods=_method_specs(model),
    )


def _quantize(quantize: dict[str, Any]) -> QuantizeConfig:
    calibration, accuracy = quantize["calibration"], quantize["accuracy"]
    data = None if calibration["data"] is None else Path(calibration["data"])
    return QuantizeConfig(
        scheme=quantize["scheme"],
        per_channel=quantize["per_channel"],
        group_size=quantize["group_size"],
        embeddings=quantize["embeddings"],
        weights=quantize["weights"],
        calibration=CalibrationConfig(data, calibration["samples"], calibration["seed"], calibration["observer"],
                                      calibration["bias_correction"],
                                      None if calibration["text"] is None else Path(calibration["text"])),
        modules=tuple(ModuleOverride(**item) for item in quantize["modules"]),
        accuracy=None if accuracy is None else AccuracyConfig(**accuracy),
    )


def _method_specs(model: dict[str, Any]) -> tuple[MethodSpec, ...]:
    """model.methods sorted by name, or the one method `forward` of model.inputs/dynamic."""
    declared = model.get("methods", {"forward": model})
    return tuple(
        MethodSpec(
            name=name,
            inputs=tuple(_input_spec(spec) for spec in declared[name]["inputs"]),
            dynamic=_dynamic(declared[name]["dynamic"]),
        )
        for name in sorted(declared)
    )


def _dynamic(data: dict[str, Any] | None) -> FrozenMapping[int, FrozenMapping[int, DimRange]]:
    """`{"0": {"1": {"min": 1, "max": 8}}}` -> {0: {1: DimRange(1, 8)}}, keys in numeric order."""

    def numeric(mapping: dict[str, Any]) -> list[tuple[int, Any]]:
        return sorted(((int(key), value) for key, value in mapping.items()), key=lambda kv: kv[0])

    return FrozenMapping(
        {
            index: FrozenMapping({dim: DimRange(**bounds) for dim, bounds in numeric(dims)})
            for index, dims in numeric(data or {})
        }
    )


def _input_spec(spec: dict[str, Any]) -> InputSpec:
    return InputSpec(
        shape=tuple(spec["shape"]), dtype=spec["dtype"], name=spec["name"], low=spec["low"], high=spec["high"]
    )
