"""Read one recipe file into plain data, keeping the file:line:column of every key and value.

YAML is read safely (no tags that build objects) and within bounds, so that a hostile or
broken file is a RecipeError in milliseconds: at most `MAX_FILE_BYTES` of text, lists and
mappings nested at most `MAX_DEPTH` deep (deeper YAML would exhaust Python's recursion), and
at most `MAX_VALUES` values once aliases are expanded (nested anchors — a "billion laughs"
document — grow exponentially when expanded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from etbuild.errors import RecipeError
from etbuild.recipe.places import KeyPath, Location, located_error, show

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000


@dataclass
class Doc:
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


def parse(shown: str, holds: str = "recipe sections") -> Doc:
    """Read one YAML file into a Doc; every YAML problem becomes a located RecipeError.
    `holds` says what its top-level mapping holds, for the error when it is not a mapping."""
    text = _read(shown)
    doc = Doc({}, {}, {}, {shown: Path(shown).resolve()})
    loader = _RecipeLoader(text, shown)
    try:
        node = loader.get_single_node()
        data = None if node is None else _NodeReader(loader, shown, doc).read(node, (), frozenset())
    except yaml.YAMLError as exc:
        raise RecipeError(_yaml_message(shown, exc)) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        got = "an empty file" if data is None else show(data)
        where = doc.values.get((), Location(shown, 1, 1))
        raise located_error(where, (), f"expected a mapping of {holds}; got {got}")
    doc.data = data
    return doc


def _read(shown: str) -> str:
    """The text of the file, at most MAX_FILE_BYTES of UTF-8."""
    try:
        with open(shown, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            size = Path(shown).stat().st_size
            raise RecipeError(f"{shown}: expected a recipe of at most {MAX_FILE_BYTES} bytes; got {size}")
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{shown}: cannot read recipe: {_reason(exc)}") from None


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


def _too_deep(where: Location) -> RecipeError:
    return located_error(where, (), f"expected lists and mappings nested at most {MAX_DEPTH} deep; got deeper")


class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader that reads floats without a dot (`1e-4`, as in YAML 1.2) as numbers and
    refuses nesting deeper than MAX_DEPTH while composing (PyYAML's composer recurses)."""

    def __init__(self, text: str, shown: str) -> None:
        super().__init__(text)
        self.shown, self.depth = shown, 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if not self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _too_deep(Location(self.shown, mark.line + 1, mark.column + 1))
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class _NodeReader:
    """Turns composed YAML nodes into plain data, recording where each key and value starts.

    Aliases are expanded here (the composer shares the anchored node), so this is where the
    expanded size and depth are bounded.
    """

    def __init__(self, loader: yaml.SafeLoader, shown: str, doc: Doc) -> None:
        self.loader, self.shown, self.doc = loader, shown, doc
        self.count = 0

    def at(self, node: yaml.Node) -> Location:
        return Location(self.shown, node.start_mark.line + 1, node.start_mark.column + 1)

    def read(self, node: yaml.Node, path: KeyPath, active: frozenset[int]) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:
            message = f"expected at most {MAX_VALUES} values once YAML aliases are expanded; got more"
            raise located_error(self.at(node), (), message)
        if len(path) >= MAX_DEPTH and isinstance(node, yaml.CollectionNode):
            raise _too_deep(self.at(node))
        self.doc.values[path] = self.at(node)
        if id(node) in active:
            raise located_error(self.at(node), path, "expected plain data; got a recursive YAML alias")
        if isinstance(node, yaml.MappingNode):
            return self.read_mapping(node, path, active | {id(node)})
        if isinstance(node, yaml.SequenceNode):
            inner = active | {id(node)}
            return [self.read(item, (*path, i), inner) for i, item in enumerate(node.value)]
        return self.loader.construct_object(node)

    def read_mapping(self, node: yaml.MappingNode, path: KeyPath, active: frozenset[int]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise located_error(self.at(key_node), path, "expected a plain key; got a list or mapping")
            key = key_node.value  # keys are their source text: `0:` is "0", `on:` is "on"
            if key in out:
                first = self.doc.keys[(*path, key)]
                message = f"duplicate key '{key}' (first set at {first})"
                raise located_error(self.at(key_node), (*path, key), message)
            self.doc.keys[(*path, key)] = self.at(key_node)
            out[key] = self.read(value_node, (*path, key), active)
        return out
