"""The recipe as frozen dataclasses, one per section, with defaults read from the schema.

`schema/recipe.schema.json` is the only place a default is written: dataclass defaults read
it with `default(...)`, and loading fills missing keys from it. Frozen recipe data is made of
these dataclasses, `FrozenMapping`s, tuples and scalars, so a Recipe is hashable.
"""

from __future__ import annotations

import copy
import glob
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from etbuild.errors import RecipeError
from etbuild.recipe.places import KeyPath, Location, format_key_path, parse_key_path
from etbuild.schema import RECIPE_SCHEMA

SCHEMA: dict[str, Any] = json.loads(RECIPE_SCHEMA.read_text(encoding="utf-8"))
_K = TypeVar("_K")
_V = TypeVar("_V")


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """Follow a local `$ref` (`#/$defs/name`); callers read a `default` beside it first."""
    while "$ref" in schema:
        schema = SCHEMA["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    return schema


def schema_at(*keys: str) -> dict[str, Any]:
    """The schema of the property at `keys`, following `$ref`s on the way."""
    schema = SCHEMA
    for key in keys:
        schema = resolve(schema)["properties"][key]
    return schema


def default(*keys: str) -> Any:
    """The schema's default for the property at `keys`: dataclass defaults read it from here."""
    return copy.deepcopy(schema_at(*keys)["default"])


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


def thaw(value: Any) -> Any:
    """Frozen recipe data as plain data again: FrozenMappings become dicts, tuples lists."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    return value


# ---------------------------------------------------------------------------- model


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
    seed: int = default("model", "seed")
    methods: tuple[MethodSpec, ...] = ()

    def __post_init__(self) -> None:
        if not self.methods:
            object.__setattr__(self, "methods", (MethodSpec("forward", self.inputs),))
        elif not self.inputs:
            object.__setattr__(self, "inputs", self.methods[0].inputs)

    def factory_kwargs(self) -> dict[str, Any]:
        """`kwargs` as the plain data the recipe wrote (dicts and lists, a fresh copy): what the factory and its
        model kind's functions (`etbuild.recipe.kinds`) take."""
        thawed: dict[str, Any] = thaw(self.kwargs)
        return thawed

    def method(self, name: str) -> MethodSpec:
        """The method called `name`; KeyError naming the recipe's methods if there is none."""
        for spec in self.methods:
            if spec.name == name:
                return spec
        names = ", ".join(spec.name for spec in self.methods)
        raise KeyError(f"no method {name!r} in this recipe; it has {names}")


# ---------------------------------------------------------------------------- quantize


@dataclass(frozen=True)
class CalibrationConfig:
    """Calibration inputs for int8-static: the arrays of `data` (an .npz, absolute once loaded),
    or, when `data` is None, `samples` inputs drawn from the recipe's inputs with `seed`; and the
    `observer` that turns what they produce into activation ranges; `bias_correction` recentres each
    int8-static layer's mean output per channel on the float model's (`etbuild.quantize.bias_correction`);
    `text` (absolute once loaded) is a language model's calibration text (`etbuild.llm.calibration`): a file or
    a glob of files."""

    data: Path | None = default("quantize", "calibration", "data")
    samples: int = default("quantize", "calibration", "samples")
    seed: int = default("quantize", "calibration", "seed")
    observer: str = default("quantize", "calibration", "observer")
    bias_correction: bool = default("quantize", "calibration", "bias_correction")
    text: Path | None = default("quantize", "calibration", "text")

    def text_files(self) -> tuple[Path, ...]:
        """The files `text` names, sorted (a glob's matches; `**` reaches into subfolders); none without text."""
        if self.text is None:
            return ()
        return tuple(sorted(Path(m) for m in glob.glob(str(self.text), recursive=True) if Path(m).is_file()))


@dataclass(frozen=True)
class ModuleOverride:
    """Modules whose path matches the glob `module` get `scheme` (`float`: not quantized) and
    their static activations `observer`; None leaves that choice to later globs or the recipe."""

    module: str
    scheme: str | None = None
    observer: str | None = None


@dataclass(frozen=True)
class AccuracyConfig:
    """The gate against the float model: exactly one of `min_snr_db` and `top1_agreement`.

    `fallback` "auto", when the scheme misses the gate, chooses observers per layer and then keeps
    layers at higher precision, most accuracy per byte first, until it holds (`quantize.search`).
    """

    min_snr_db: float | None = None
    top1_agreement: float | None = None
    fallback: str = default("quantize", "accuracy", "fallback")


@dataclass(frozen=True)
class QuantizeConfig:
    """How to quantize. `modules` keep the recipe's order: the first glob that matches wins."""

    scheme: str
    per_channel: bool = default("quantize", "per_channel")
    group_size: int = default("quantize", "group_size")
    embeddings: str | None = default("quantize", "embeddings")
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    modules: tuple[ModuleOverride, ...] = ()
    accuracy: AccuracyConfig | None = None
    weights: str = default("quantize", "weights")


# ---------------------------------------------------------------------------- backends, memory


@dataclass(frozen=True)
class BackendConfig:
    """One partitioner, in priority order. `options` belong to the backend, which checks them
    against its own table; here they are only frozen."""

    name: str
    options: Mapping[str, Any] = field(default_factory=FrozenMapping)


@dataclass(frozen=True)
class LevelConfig:
    """One level of the memory hierarchy; `bytes` None means no limit."""

    name: str
    bytes: int | None = None
    alignment: int = default("memory", "alignment")


def _default_levels() -> tuple[LevelConfig, ...]:
    return tuple(LevelConfig(**level) for level in default("memory", "levels"))


@dataclass(frozen=True)
class RuleConfig:
    """A placement rule: tensors of at most `max_bytes`, or from modules matching `module`, go to `level`."""

    level: str
    max_bytes: int | None = None
    module: str | None = None


@dataclass(frozen=True)
class MemoryConfig:
    """How to plan memory. Loaded levels carry memory.alignment unless they set their own."""

    planner: str = default("memory", "planner")
    alignment: int = default("memory", "alignment")
    levels: tuple[LevelConfig, ...] = field(default_factory=_default_levels)
    rules: tuple[RuleConfig, ...] = ()


# ---------------------------------------------------------------------------- operators, verify


@dataclass(frozen=True)
class OperatorsConfig:
    """The operator allowlist; `allow` None allows every operator.

    Entries are operator names, fnmatch globs, and `@file` entries naming files of them
    (absolute once loaded; `allow: file.txt` loads as the one entry `@/abs/file.txt`).
    """

    allow: tuple[str, ...] | None = default("operators", "allow")

    @property
    def files(self) -> tuple[Path, ...]:
        """The allowlist files that `@file` entries name."""
        return tuple(Path(entry[1:]) for entry in self.allow or () if entry.startswith("@"))


@dataclass(frozen=True)
class VerifyConfig:
    """How to compare the program against eager PyTorch.

    `tokens`, `agreement` and `fallback` judge a language model (its model kind, `etbuild.recipe.kinds`): None
    leaves `tokens` and `agreement` to the kind's defaults; `fallback` "auto" asks for its agreement search.
    """

    samples: int = default("verify", "samples")
    rtol: float = default("verify", "rtol")
    atol: float = default("verify", "atol")
    seed: int = default("verify", "seed")
    bundle: bool = default("verify", "bundle")  # also write `<recipe>.bpte` (etbuild.verify.bundle)
    tokens: int | None = None
    agreement: float | None = None
    fallback: str = "none"


@dataclass(frozen=True)
class WeightsConfig:
    """Weights kept apart from the program: `<file>.ptd`, holding the keys `only` matches (all when None)."""

    file: str
    only: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EmitConfig:
    """How the program is written: `weights` None keeps them inside the `.pte`."""

    weights: WeightsConfig | None = None


# ---------------------------------------------------------------------------- the recipe


@dataclass(frozen=True)
class Recipe:
    """A validated product recipe with its `extends:` chain merged and defaults filled.

    `quantize` is None for a float model. `locations` maps key paths to where they were written.
    """

    name: str
    path: Path
    model: ModelConfig
    quantize: QuantizeConfig | None
    backends: tuple[BackendConfig, ...]
    memory: MemoryConfig
    operators: OperatorsConfig
    verify: VerifyConfig
    sources: tuple[Path, ...]
    locations: Mapping[KeyPath, Location] = field(repr=False, compare=False)
    _data: Mapping[str, Any] = field(repr=False, compare=False)
    emit: EmitConfig = field(default_factory=EmitConfig)

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
