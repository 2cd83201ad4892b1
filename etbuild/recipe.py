"""Recipes: read YAML, resolve `extends:`, validate, fill defaults, give frozen dataclasses.

`load_recipe` runs these steps in order:

1. parse each file with a SafeLoader subclass, keeping the file:line:column of every key and value;
2. deep-merge the `extends:` chain (mappings merge key by key; lists and scalars replace);
3. validate against `schema/recipe.schema.json`, reject sections in `NOT_SUPPORTED_YET`, then
   check what the schema cannot say: exactly one of `model.inputs` and `model.methods`, integer
   input bounds, and dynamic dimensions that name real inputs and hold their declared sizes;
4. fill defaults from the schema's `default` fields (the only place defaults are written),
   normalize sizes and file paths, and build the frozen dataclasses.

Every `RecipeError` reads `file:line:column: key.path[0]: what was wrong`, pointing into the file
(product or base) that holds the offending node.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import jsonschema
import yaml

from etbuild.errors import InternalError, RecipeError
from etbuild.schema import RECIPE_SCHEMA

KeyPath = tuple[str | int, ...]

NOT_SUPPORTED_YET: tuple[KeyPath, ...] = (
    ("quantize",),
    ("backends", 0),
)
"""Key paths whose stage does not exist yet: a recipe is rejected when one holds a non-null value.
A trailing index means "a list with that item": `("backends", 0)` is a first backend."""

_SCHEMA: dict[str, Any] = json.loads(RECIPE_SCHEMA.read_text(encoding="utf-8"))
_INTEGER_DTYPES = ("int64", "int32", "uint8", "int8")
_SIZE = re.compile(r"([0-9]+) ?(B|KiB|MiB|GiB)")
_SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_FILE_FACTORY = re.compile(r"(?P<file>[^:]+\.py):(?P<attr>[^:]+)")
_PATH_SEGMENT = re.compile(r"([^.\[\]]+)((?:\[[0-9]+\])*)")
_MIN_DYNAMIC_EXAMPLE = 2
"""torch.export specializes an example size of 0 or 1 to a constant, so a dynamic dimension's
declared (example) size must be at least this; its range may still start at 1."""
_K = TypeVar("_K")
_V = TypeVar("_V")


# ---------------------------------------------------------------------------- key paths, places


@dataclass(frozen=True)
class Location:
    """Where a YAML node starts: the file as the caller named it, 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def format_key_path(path: KeyPath) -> str:
    """`("model", "inputs", 0, "dtype")` -> `"model.inputs[0].dtype"`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def parse_key_path(text: str) -> KeyPath:
    """`"model.inputs[0].dtype"` -> `("model", "inputs", 0, "dtype")`."""
    parts: list[str | int] = []
    for segment in text.split("."):
        match = _PATH_SEGMENT.fullmatch(segment)
        if match is None:
            raise ValueError(f"malformed key path {text!r}")
        parts.append(match[1])
        parts.extend(int(index) for index in re.findall(r"[0-9]+", match[2]))
    return tuple(parts)


def _error(where: Location, path: KeyPath, message: str) -> RecipeError:
    """The one message format: `file:line:column: key.path: message`."""
    if not path:
        return RecipeError(f"{where}: {message}")
    return RecipeError(f"{where}: {format_key_path(path)}: {message}")


def _did_you_mean(word: str, choices: list[str]) -> str:
    """` — did you mean 'x'?` for the closest choice, or ``."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" — did you mean '{close[0]}'?" if close else ""


def _show(value: Any) -> str:
    """A value as an error message quotes it (YAML spelling for scalars)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        text = "[" + ", ".join(_show(item) for item in value) + "]"
        flat = not any(isinstance(item, dict | list) for item in value)
        return text if flat and len(text) <= 40 else "a list"
    return repr(value)


# ---------------------------------------------------------------------------- the dataclasses


class FrozenMapping(Mapping[_K, _V]):
    """A read-only, hashable mapping: frozen recipe data is made of these, tuples and scalars."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[_K, _V] = MappingProxyType({})) -> None:
        self._items = dict(items)

    def __getitem__(self, key: _K) -> _V:
        return self._items[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"FrozenMapping({self._items!r})"


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """Follow a local `$ref` (`#/$defs/name`); callers read a `default` beside it first."""
    while "$ref" in schema:
        schema = _SCHEMA["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    return schema


def _schema_at(*keys: str) -> dict[str, Any]:
    """The schema of the property at `keys`, following `$ref`s."""
    schema = _SCHEMA
    for key in keys:
        schema = _resolve(schema)["properties"][key]
    return schema


def _default(*keys: str) -> Any:
    """The schema's default for the property at `keys`: dataclass defaults read it from here."""
    return copy.deepcopy(_schema_at(*keys)["default"])


@dataclass(frozen=True)
class InputSpec:
    """One model input. `low`/`high` bound random samples of integer inputs (None: 0 and 10)."""

    shape: tuple[int, ...]
    dtype: str
    name: str | None = None
    low: int | None = None
    high: int | None = None


@dataclass(frozen=True)
class DimRange:
    """The sizes a dynamic dimension takes: `min <= size <= max`, both inclusive."""

    min: int
    max: int


@dataclass(frozen=True)
class MethodSpec:
    """One method to export: its inputs (their declared shapes are the export example) and its
    dynamic dimensions, `{input index: {dimension index: DimRange}}` (empty: all static)."""

    name: str
    inputs: tuple[InputSpec, ...]
    dynamic: Mapping[int, Mapping[int, DimRange]] = field(default_factory=FrozenMapping)


@dataclass(frozen=True)
class ModelConfig:
    """What to export. A file factory and `weights` are absolute paths once loaded.

    `methods` (sorted by name) is always filled: a recipe with `model.inputs` has the one
    method `forward`. `inputs` is the first method's inputs, for callers that predate methods;
    built by hand, a ModelConfig with only `inputs` gets `methods = (forward,)` and vice versa.
    """

    factory: str
    inputs: tuple[InputSpec, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=FrozenMapping)
    weights: Path | None = None
    seed: int = _default("model", "seed")
    methods: tuple[MethodSpec, ...] = ()

    def __post_init__(self) -> None:
        if not self.methods:
            object.__setattr__(self, "methods", (MethodSpec("forward", self.inputs),))
        elif not self.inputs:
            object.__setattr__(self, "inputs", self.methods[0].inputs)

    def method(self, name: str) -> MethodSpec:
        """The method called `name`; KeyError naming the recipe's methods if there is none."""
        for spec in self.methods:
            if spec.name == name:
                return spec
        names = ", ".join(spec.name for spec in self.methods)
        raise KeyError(f"no method {name!r} in this recipe; it has {names}")


@dataclass(frozen=True)
class LevelConfig:
    """One level of the memory hierarchy; `bytes` None means no limit."""

    name: str
    bytes: int | None = None
    alignment: int = _default("memory", "alignment")


def _default_levels() -> tuple[LevelConfig, ...]:
    return tuple(LevelConfig(**level) for level in _default("memory", "levels"))


@dataclass(frozen=True)
class RuleConfig:
    """A placement rule: tensors of at most `max_bytes`, or from modules matching `module`, go to `level`."""

    level: str
    max_bytes: int | None = None
    module: str | None = None


@dataclass(frozen=True)
class MemoryConfig:
    """How to plan memory. Loaded levels carry memory.alignment unless they set their own."""

    planner: str = _default("memory", "planner")
    alignment: int = _default("memory", "alignment")
    levels: tuple[LevelConfig, ...] = field(default_factory=_default_levels)
    rules: tuple[RuleConfig, ...] = ()


@dataclass(frozen=True)
class VerifyConfig:
    """How to compare the program against eager PyTorch."""

    samples: int = _default("verify", "samples")
    rtol: float = _default("verify", "rtol")
    atol: float = _default("verify", "atol")
    seed: int = _default("verify", "seed")


@dataclass(frozen=True)
class Recipe:
    """A validated product recipe with its `extends:` chain merged and defaults filled.

    `quantize`, `backends` and `operators` hold the validated data, frozen (mappings become
    FrozenMapping, lists tuples). `locations` maps key paths to where they were written.
    """

    name: str
    path: Path
    model: ModelConfig
    memory: MemoryConfig
    verify: VerifyConfig
    quantize: Mapping[str, Any] | None
    backends: tuple[Mapping[str, Any], ...]
    operators: Mapping[str, Any] | None
    sources: tuple[Path, ...]
    locations: Mapping[KeyPath, Location] = field(repr=False, compare=False)
    _data: Mapping[str, Any] = field(repr=False, compare=False)

    def section(self, key: str) -> Any:
        """A top-level section as plain JSON-able data (a fresh copy, keys sorted)."""
        if key not in self._data:
            raise KeyError(f"no recipe section {key!r}; expected one of {', '.join(self._data)}")
        return copy.deepcopy(self._data[key])

    def where(self, key_path: str | KeyPath) -> str:
        """`file:line:column` of a key (of its nearest written ancestor if it was defaulted)."""
        path = parse_key_path(key_path) if isinstance(key_path, str) else tuple(key_path)
        while path and path not in self.locations:
            path = path[:-1]
        return str(self.locations.get(path, Location(str(self.path), 1, 1)))

    def error(self, key_path: str | KeyPath, message: str) -> RecipeError:
        """A RecipeError in the standard format, located at `key_path`."""
        path = parse_key_path(key_path) if isinstance(key_path, str) else tuple(key_path)
        return RecipeError(f"{self.where(path)}: {format_key_path(path)}: {message}")


# ---------------------------------------------------------------------------- public entry points


def load_recipe(path: str | Path) -> Recipe:
    """Load, merge, validate and complete the recipe at `path` (messages name it as given)."""
    doc = _load_chain(os.fspath(path), ())
    _validate(doc)
    _reject_unsupported(doc)
    _check_inputs_or_methods(doc)
    _check_inputs(doc)
    _check_dynamic(doc)
    _check_memory(doc)
    data = copy.deepcopy(doc.data)
    _fill_defaults(data, _SCHEMA)
    _normalize(data, doc)
    return _build(Path(path), doc, _sorted(data))


def discover_recipes(root: str | Path = "recipes") -> list[Path]:
    """Every `*.yaml` product recipe under `root`, sorted.

    Files under a `base/` folder are bases, not products; files under an `errors/` folder are
    recipes that must fail (examples of error messages, built by the tests).
    """
    root = Path(root)
    return sorted(
        path
        for path in root.rglob("*.yaml")
        if path.is_file() and not {"base", "errors"} & set(path.relative_to(root).parts[:-1])
    )


# ---------------------------------------------------------------------------- parsing YAML


class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader that also reads floats without a dot (`1e-4`, as in YAML 1.2) as numbers."""


_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


@dataclass
class _Doc:
    """Parsed (and possibly merged) recipe data with the location of every key and value."""

    data: dict[str, Any]
    keys: dict[KeyPath, Location]
    values: dict[KeyPath, Location]
    files: dict[str, Path]  # shown name -> absolute path, product first

    def where(self, path: KeyPath) -> Location:
        """Location of the key at `path`, else of its value, else of the nearest ancestor."""
        while path not in self.keys and path not in self.values and path:
            path = path[:-1]
        return self.keys.get(path) or self.values[path]


def _parse(shown: str) -> _Doc:
    """Read one YAML file into a _Doc; every YAML problem becomes a located RecipeError."""
    try:
        text = Path(shown).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{shown}: cannot read recipe: {_reason(exc)}") from None
    doc = _Doc({}, {}, {}, {shown: Path(shown).resolve()})
    loader = _RecipeLoader(text)
    try:
        node = loader.get_single_node()
        data = None if node is None else _NodeReader(loader, shown, doc).read(node, (), frozenset())
    except yaml.YAMLError as exc:
        raise RecipeError(_yaml_message(shown, exc)) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        got = "an empty file" if data is None else _show(data)
        where = doc.values.get((), Location(shown, 1, 1))
        raise _error(where, (), f"expected a mapping of recipe sections; got {got}")
    doc.data = data
    return doc


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _yaml_message(shown: str, exc: yaml.YAMLError) -> str:
    """`file:line:column: invalid YAML: problem (context)` from PyYAML's marked errors."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    detail = f"{problem} ({context})" if context else problem
    where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
    return f"{where}: invalid YAML: {detail}"


class _NodeReader:
    """Turns composed YAML nodes into plain data, recording where each key and value starts."""

    def __init__(self, loader: yaml.SafeLoader, shown: str, doc: _Doc) -> None:
        self.loader, self.shown, self.doc = loader, shown, doc

    def at(self, node: yaml.Node) -> Location:
        return Location(self.shown, node.start_mark.line + 1, node.start_mark.column + 1)

    def read(self, node: yaml.Node, path: KeyPath, active: frozenset[int]) -> Any:
        self.doc.values[path] = self.at(node)
        if id(node) in active:
            raise _error(self.at(node), path, "expected plain data; got a recursive YAML alias")
        if isinstance(node, yaml.MappingNode):
            return self.read_mapping(node, path, active | {id(node)})
        if isinstance(node, yaml.SequenceNode):
            inner = active | {id(node)}
            return [self.read(item, (*path, i), inner) for i, item in enumerate(node.value)]
        return self.loader.construct_object(node)

    def read_mapping(
        self, node: yaml.MappingNode, path: KeyPath, active: frozenset[int]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _error(self.at(key_node), path, "expected a plain key; got a list or mapping")
            key = key_node.value  # keys are their source text: `0:` is "0", `on:` is "on"
            if key in out:
                first = self.doc.keys[(*path, key)]
                message = f"duplicate key '{key}' (first set at {first})"
                raise _error(self.at(key_node), (*path, key), message)
            self.doc.keys[(*path, key)] = self.at(key_node)
            out[key] = self.read(value_node, (*path, key), active)
        return out


# ---------------------------------------------------------------------------- extends


def _load_chain(shown: str, chain: tuple[tuple[str, Path], ...]) -> _Doc:
    """Parse `shown` and, recursively, the bases it extends; return them merged."""
    doc = _parse(shown)
    if "extends" not in doc.data:
        return doc
    base_ref = doc.data.pop("extends")
    where = doc.values[("extends",)]
    if not isinstance(base_ref, str) or not base_ref:
        expected = _schema_at("extends")["x-expected"]
        raise _error(where, ("extends",), f"expected {expected}; got {_show(base_ref)}")
    base_shown = os.path.normpath(os.path.join(os.path.dirname(shown), base_ref))
    base_path = Path(base_shown).resolve()
    chain = (*chain, (shown, doc.files[shown]))
    if any(path == base_path for _, path in chain):
        names = " -> ".join([*(name for name, _ in chain), base_shown])
        raise _error(where, ("extends",), f"cycle in the extends chain: {names}")
    if not base_path.is_file():
        message = f"expected an existing recipe file; got '{base_ref}' ({base_shown} not found)"
        raise _error(where, ("extends",), message)
    return _merge(_load_chain(base_shown, chain), doc)


def _merge(base: _Doc, over: _Doc) -> _Doc:
    """`over` deep-merged onto `base`, locations following the data they describe."""
    replaced: list[KeyPath] = []
    data = _merge_values(base.data, over.data, (), replaced)

    def kept(places: dict[KeyPath, Location]) -> dict[KeyPath, Location]:
        return {p: w for p, w in places.items() if not any(p[: len(r)] == r for r in replaced)}

    return _Doc(
        data,
        {**kept(base.keys), **over.keys},
        {**kept(base.values), **over.values},
        {**over.files, **base.files},
    )


def _merge_values(base: Any, over: Any, path: KeyPath, replaced: list[KeyPath]) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            if key in base:
                merged[key] = _merge_values(base[key], value, (*path, key), replaced)
            else:
                merged[key] = value
        return merged
    replaced.append(path)
    return over


# ---------------------------------------------------------------------------- validation


def _power_of_two(
    validator: Any, enabled: bool, instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """The `powerOfTwo` keyword."""
    if enabled and validator.is_type(instance, "integer") and not _is_power_of_two(instance):
        yield jsonschema.ValidationError(f"{instance!r} is not a power of two")


def _is_power_of_two(number: int) -> bool:
    return number >= 1 and not number & (number - 1)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"powerOfTwo": _power_of_two}
)
_VALIDATOR = _Validator(_SCHEMA)

_TYPE_PHRASES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _type_phrase(types: str | list[str]) -> str:
    names = [types] if isinstance(types, str) else types
    return " or ".join(_TYPE_PHRASES[name] for name in names)


def _bound_phrase(schema: dict[str, Any], op: str, bound: Any) -> str:
    types = schema.get("type", "number")
    kind = types if isinstance(types, str) else next(t for t in types if t != "null")
    return f"{_type_phrase(kind)} {op} {bound}"


_EXPECTED = {
    "type": lambda schema, value: _type_phrase(value),
    "enum": lambda schema, value: "one of " + ", ".join(str(choice) for choice in value),
    "minimum": lambda schema, value: _bound_phrase(schema, ">=", value),
    "exclusiveMinimum": lambda schema, value: _bound_phrase(schema, ">", value),
    "maximum": lambda schema, value: _bound_phrase(schema, "<=", value),
    "minItems": lambda schema, value: f"a list of at least {value} item{'s' * (value != 1)}",
    "minProperties": lambda schema, value: f"a mapping of at least {value} key{'s' * (value != 1)}",
    "minLength": lambda schema, value: f"a string of at least {value} character(s)",
    "pattern": lambda schema, value: f"a string matching {value}",
    "powerOfTwo": lambda schema, value: "a power of two",
}


def _validate(doc: _Doc) -> None:
    """Raise the first schema violation in file order (product first) as a RecipeError."""
    order = list(doc.files)
    found = [_describe(error, doc) for error in _VALIDATOR.iter_errors(doc.data)]
    if found:
        where, path, message = min(
            found, key=lambda f: (order.index(f[0].file), f[0].line, f[0].column)
        )
        raise _error(where, path, message)


def _describe(error: jsonschema.ValidationError, doc: _Doc) -> tuple[Location, KeyPath, str]:
    """Where a schema violation is, its key path, and the message for it."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties":
        known = list(error.schema.get("properties", {}))
        key = next(k for k in error.instance if k not in known)
        return doc.where((*path, key)), (*path, key), _unknown_key(key, known)
    if error.validator == "required":
        key = next(k for k in error.validator_value if k not in error.instance)
        return doc.values[path], (*path, key), f"missing required key '{key}'"
    if "propertyNames" in error.relative_schema_path:
        path = (*path, error.instance)
        return doc.where(path), path, _expected(error)
    return doc.values[path], path, _expected(error)


def _unknown_key(key: str, known: list[str]) -> str:
    hint = _did_you_mean(key, known)
    if hint:
        return f"unknown key '{key}'{hint}"
    return f"unknown key '{key}'; expected one of {', '.join(known)}"


def _expected(error: jsonschema.ValidationError) -> str:
    """`expected <what>; got <value>[ — did you mean <choice>?]` for one violated keyword."""
    phrase = error.schema.get("x-expected")
    if phrase is None and error.validator in _EXPECTED:
        phrase = _EXPECTED[str(error.validator)](error.schema, error.validator_value)
    if phrase is None:
        phrase = f"a value that satisfies '{error.validator}' ({error.message})"
    message = f"expected {phrase}; got {_show(error.instance)}"
    if error.validator == "enum" and isinstance(error.instance, str):
        message += _did_you_mean(error.instance, [str(c) for c in error.validator_value])
    return message


def _lookup(data: Any, path: KeyPath) -> Any:
    """The value at `path`, or None when the path does not exist."""
    for part in path:
        if isinstance(part, int):
            found = isinstance(data, list) and part < len(data)
        else:
            found = isinstance(data, dict) and part in data
        if not found:
            return None
        data = data[part]
    return data


def _reject_unsupported(doc: _Doc) -> None:
    """Reject a recipe that sets a key path of `NOT_SUPPORTED_YET`."""
    for path in NOT_SUPPORTED_YET:
        if _lookup(doc.data, path) is not None:
            section = path
            while isinstance(section[-1], int):
                section = section[:-1]
            raise _error(doc.where(path), path, f"not supported yet: {format_key_path(section)}")


def _check_memory(doc: _Doc) -> None:
    """Level names are unique and every rule names a level."""
    memory = doc.data.get("memory") or {}
    names = [level["name"] for level in memory.get("levels") or [{"name": "dram"}]]
    for i, name in enumerate(names):
        if name in names[:i]:
            path = ("memory", "levels", i, "name")
            raise _error(doc.where(path), path, f"level {name!r} is already defined")
    for i, rule in enumerate(memory.get("rules") or []):
        if rule["level"] not in names:
            path = ("memory", "rules", i, "level")
            message = f"expected one of the levels {', '.join(names)}; got {rule['level']!r}"
            raise _error(doc.where(path), path, message + _did_you_mean(rule["level"], names))


def _check_inputs_or_methods(doc: _Doc) -> None:
    """`model` gives exactly one of `inputs` (forward) and `methods`; `dynamic` goes with inputs."""
    model = doc.data["model"]
    if "inputs" not in model and "methods" not in model:
        message = "expected 'inputs' (to export forward) or 'methods'; got neither"
        raise _error(doc.values[("model",)], ("model",), message)
    if "inputs" in model and "methods" in model:
        message = (
            "expected 'inputs' (to export forward) or 'methods', not both"
            f" (model.inputs is set at {doc.where(('model', 'inputs'))})"
        )
        raise _error(doc.where(("model", "methods")), ("model", "methods"), message)
    if "methods" in model and model.get("dynamic") is not None:
        message = "expected no model.dynamic beside model.methods; set model.methods.<name>.dynamic"
        raise _error(doc.where(("model", "dynamic")), ("model", "dynamic"), message)


def _declared_methods(model: dict[str, Any]) -> list[tuple[KeyPath, dict[str, Any]]]:
    """(key path, data holding `inputs` and maybe `dynamic`) of each method `model` declares."""
    if "methods" in model:
        return [(("model", "methods", name), spec) for name, spec in model["methods"].items()]
    return [(("model",), model)]


def _check_inputs(doc: _Doc) -> None:
    """What the schema cannot say about inputs: `low`/`high` are for integer dtypes, low < high."""
    for method_path, method in _declared_methods(doc.data["model"]):
        for i, spec in enumerate(method["inputs"]):
            _check_input_bounds(doc, (*method_path, "inputs", i), spec)


def _check_input_bounds(doc: _Doc, path: KeyPath, spec: dict[str, Any]) -> None:
    bounds = {key: spec[key] for key in ("low", "high") if spec.get(key) is not None}
    if bounds and spec["dtype"] not in _INTEGER_DTYPES:
        key = next(iter(bounds))
        message = f"expected {key} only with an integer dtype; got dtype {spec['dtype']}"
        raise _error(doc.where((*path, key)), (*path, key), message)
    if len(bounds) == 2 and bounds["high"] <= bounds["low"]:
        message = f"expected an integer > low ({bounds['low']}); got {bounds['high']}"
        raise _error(doc.where((*path, "high")), (*path, "high"), message)


def _check_dynamic(doc: _Doc) -> None:
    """Each dynamic dimension names an existing input and dimension, has min <= max, and holds
    the declared size (the export example), which must be at least `_MIN_DYNAMIC_EXAMPLE`."""
    for method_path, method in _declared_methods(doc.data["model"]):
        inputs_path = (*method_path, "inputs")
        for index, dims in (method.get("dynamic") or {}).items():
            path = (*method_path, "dynamic", index)
            if int(index) >= len(method["inputs"]):
                count = len(method["inputs"])
                message = (
                    f"expected an index into {format_key_path(inputs_path)}, which has {count}"
                    f" input{'s' * (count != 1)}; got {index}"
                )
                raise _error(doc.where(path), path, message)
            for dim in dims:
                shape_path = (*inputs_path, int(index), "shape")
                _check_dim(doc, (*path, dim), shape_path, method["inputs"][int(index)]["shape"])


def _check_dim(doc: _Doc, path: KeyPath, shape_path: KeyPath, shape: list[int]) -> None:
    """Check the range at `path` (`...dynamic.<input>.<dim>`) against the declared `shape`."""
    dim, bounds = int(path[-1]), _lookup(doc.data, path)
    if dim >= len(shape):
        message = (
            f"expected a dimension of {format_key_path(shape_path)}, {_show(shape)}; got {dim}"
        )
        raise _error(doc.where(path), path, message)
    low, high, size = bounds["min"], bounds["max"], shape[dim]
    if high < low:
        message = f"expected an integer >= min ({low}); got {high}"
        raise _error(doc.where((*path, "max")), (*path, "max"), message)
    if not low <= size <= high:
        message = (
            f"expected a range that holds {size}, the declared size"
            f" {format_key_path((*shape_path, dim))} (the export example); got [{low}, {high}]"
        )
        raise _error(doc.where(path), path, message)
    if size < _MIN_DYNAMIC_EXAMPLE:
        size_path = (*shape_path, dim)
        message = (
            f"expected a size >= {_MIN_DYNAMIC_EXAMPLE} at a dynamic dimension (torch.export"
            f" specializes an example size of 0 or 1; the range may still start at 1); got {size}"
        )
        raise _error(doc.where(size_path), size_path, message)


# ---------------------------------------------------------------------------- completing


def _fill_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Fill missing properties from the schema's `default`s, in place, recursively."""
    schema = _resolve(schema)
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


def _normalize(data: dict[str, Any], doc: _Doc) -> None:
    """Sizes to integers, level alignments inherited, file paths absolute (naming file's dir)."""
    memory = data["memory"]
    for level in memory["levels"]:
        if level["bytes"] == "unbounded":
            level["bytes"] = None
        elif isinstance(level["bytes"], str):
            level["bytes"] = _parse_size(level["bytes"])
        if level["alignment"] is None:
            level["alignment"] = memory["alignment"]
    for rule in memory["rules"]:
        if isinstance(rule["max_bytes"], str):
            rule["max_bytes"] = _parse_size(rule["max_bytes"])
    model = data["model"]
    factory = _FILE_FACTORY.fullmatch(model["factory"])
    if factory:
        file = _relative_to_naming_file(doc, ("model", "factory"), factory["file"])
        model["factory"] = f"{file}:{factory['attr']}"
    if model["weights"] is not None:
        model["weights"] = _relative_to_naming_file(doc, ("model", "weights"), model["weights"])


def _parse_size(text: str) -> int:
    """`"256KiB"` -> 262144 (the schema admits only strings that `_SIZE` matches)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise InternalError(f"size {text!r} passed the schema but does not parse")
    return int(match[1]) * _SIZE_UNITS[match[2]]


def _relative_to_naming_file(doc: _Doc, path: KeyPath, text: str) -> str:
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


def _build(path: Path, doc: _Doc, data: dict[str, Any]) -> Recipe:
    model, memory, verify = data["model"], data["memory"], data["verify"]
    return Recipe(
        name=data["name"],
        path=path,
        model=ModelConfig(
            factory=model["factory"],
            kwargs=_freeze(model["kwargs"]),
            weights=None if model["weights"] is None else Path(model["weights"]),
            seed=model["seed"],
            methods=_method_specs(model),
        ),
        memory=MemoryConfig(
            planner=memory["planner"],
            alignment=memory["alignment"],
            levels=tuple(LevelConfig(**level) for level in memory["levels"]),
            rules=tuple(RuleConfig(**rule) for rule in memory["rules"]),
        ),
        verify=VerifyConfig(
            samples=verify["samples"],
            rtol=float(verify["rtol"]),
            atol=float(verify["atol"]),
            seed=verify["seed"],
        ),
        quantize=_freeze(data["quantize"]),
        backends=_freeze(data["backends"]),
        operators=_freeze(data["operators"]),
        sources=tuple(doc.files.values()),
        locations=MappingProxyType({**doc.values, **doc.keys}),
        _data=MappingProxyType(data),
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
        shape=tuple(spec["shape"]),
        dtype=spec["dtype"],
        name=spec["name"],
        low=spec["low"],
        high=spec["high"],
    )
