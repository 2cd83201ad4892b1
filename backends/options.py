"""A backend's recipe options: a frozen dataclass per backend, checked field by field. Torch-free.

Each field of a backend's OPTIONS dataclass has a default and `metadata={"kind": ..., "doc": ...}`;
the kind says what a recipe may write there (see KINDS). `parse_options` builds the dataclass
from a recipe's `options:` mapping; an unknown option is named with its near miss and the
options there are, a value of the wrong kind says what was expected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from etbuild.errors import RecipeError, did_you_mean

T = TypeVar("T")


class OptionError(RecipeError):
    """A backend option a recipe sets is unknown or of the wrong kind; `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and bool(v) and not any(c.isspace() for c in v)


def _is_globs(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(s, str) and s for s in v)


# kind -> (check, what a value must be, how a checked value is stored)
KINDS: dict[str, tuple[Callable[[Any], bool], str, Callable[[Any], Any]]] = {
    "bool": (_is_bool, "true or false", bool),
    "count": (_is_count, "an integer >= 1", int),
    "globs": (_is_globs, "a list of non-empty glob strings", tuple),
    "name": (_is_name, "a non-empty name without spaces", str),
}


def option_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def parse_options(cls: type[T], raw: Mapping[str, Any], backend: str) -> T:
    """The options dataclass from a recipe's mapping; OptionError for an unknown key or a bad value."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {}
    for key, value in raw.items():
        if key not in fields:
            names = list(fields)
            raise OptionError(key, f"backend {backend} has no option {key!r}{did_you_mean(key, names)} "
                                   f"(its options: {', '.join(names)})")
        check, expected, store = KINDS[fields[key].metadata["kind"]]
        if not check(value):
            raise OptionError(key, f"expected {expected} for option {key!r} of backend {backend}; got {value!r}")
        values[key] = store(value)
    return cls(**values)


def describe(cls: type) -> list[tuple[str, str, Any, str]]:
    """(name, kind, default, doc) of every option, for docs and help."""
    return [(f.name, f.metadata["kind"], f.default, f.metadata.get("doc", "")) for f in dataclasses.fields(cls)]
