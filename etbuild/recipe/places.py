"""Where things are in a recipe: key paths, file positions, and the one error format.

Every `RecipeError` reads `file:line:column: key.path[0]: what was wrong`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from etbuild.errors import RecipeError

KeyPath = tuple[str | int, ...]

_PATH_SEGMENT = re.compile(r"([^.\[\]]+)((?:\[[0-9]+\])*)")


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


def located_error(where: Location, path: KeyPath, message: str) -> RecipeError:
    """The one message format: `file:line:column: key.path: message`."""
    if not path:
        return RecipeError(f"{where}: {message}")
    return RecipeError(f"{where}: {format_key_path(path)}: {message}")


def show(value: Any) -> str:
    """A value as an error message quotes it (YAML spelling for scalars)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        text = "[" + ", ".join(show(item) for item in value) + "]"
        flat = not any(isinstance(item, dict | list) for item in value)
        return text if flat and len(text) <= 40 else "a list"
    return repr(value)
