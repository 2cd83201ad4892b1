"""Which scheme and activation observer each graph node gets: the recipe's, or those of the
first `quantize.modules` globs that match the node's module.

A node's module is the innermost entry of its `nn_module_stack` (the path `named_modules`
gives, `""` for the model itself). A glob (fnmatch: `*` crosses dots) matches a node when it
matches the node's module or any module that contains it, so `head` covers `head.fc` too.
The globs are tried in the recipe's order; for each of scheme and observer, the first that
matches and sets it wins (an override may set either or both); `float` keeps the node's op
float. A glob that matches no module of the graph is a RecipeError naming it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from torch.fx import Graph, Node

from etbuild.errors import did_you_mean
from etbuild.quantize.schemes import AUTO, MINMAX
from etbuild.recipe import ModuleOverride

MODULE_STACK = "nn_module_stack"


def module_path(node: Node) -> str:
    """The path of the innermost module that ran `node` (`""`: the model itself)."""
    stack = node.meta.get(MODULE_STACK) or {}
    if not stack:
        return ""
    path, _ = list(stack.values())[-1]
    return str(path)


def enclosing(path: str) -> list[str]:
    """`"a.b.c"` -> `["a.b.c", "a.b", "a"]`: the module and those that contain it (not the root)."""
    parts = path.split(".") if path else []
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def graph_modules(graphs: Iterable[Graph]) -> list[str]:
    """Every module path that runs an operator in the graphs, with the modules containing them, sorted."""
    paths: set[str] = set()
    for graph in graphs:
        for node in graph.nodes:
            for path, _ in (node.meta.get(MODULE_STACK) or {}).values():
                paths.update(enclosing(str(path)))
    return sorted(paths)


@dataclass(frozen=True)
class SchemeMap:
    """The recipe's scheme and observer and its per-module overrides, first match wins."""

    default: str
    overrides: tuple[ModuleOverride, ...] = ()
    observer: str = MINMAX

    def scheme_of(self, node: Node) -> str:
        return self.for_path(module_path(node))

    def for_path(self, path: str) -> str:
        found = self._first(path, "scheme")
        return self.default if found is None else found

    def named(self, node: Node) -> bool:
        """Whether an override, not the recipe's scheme, gives `node` its scheme."""
        return self._first(module_path(node), "scheme") is not None

    def observer_of(self, node: Node) -> str:
        """The observer of the static activations `node`'s op quantizes."""
        found = self._first(module_path(node), "observer")
        return self.observer if found is None else found

    def _first(self, path: str, attribute: str) -> str | None:
        for override in self.overrides:
            value = getattr(override, attribute)
            if value is not None and any(fnmatch.fnmatchcase(p, override.module) for p in enclosing(path)):
                return str(value)
        return None

    @property
    def uses_auto(self) -> bool:
        """Whether the recipe's observer or an override's is `auto`."""
        return AUTO in (self.observer, *(o.observer for o in self.overrides))

    def resolving_auto(self, observer: str) -> SchemeMap:
        """This map with every `auto` observer (the recipe's and the overrides') made `observer`."""
        overrides = tuple(replace(o, observer=observer) if o.observer == AUTO else o for o in self.overrides)
        return SchemeMap(self.default, overrides, observer if self.observer == AUTO else self.observer)

    def with_float(self, paths: Sequence[str]) -> SchemeMap:
        """This map with `paths` (exact module paths) kept float ahead of every other override."""
        kept = tuple(ModuleOverride(_literal(p), "float") for p in paths)
        return SchemeMap(self.default, kept + self.overrides, self.observer)


def _literal(path: str) -> str:
    """An fnmatch pattern that matches `path` only."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def unmatched_glob(overrides: Sequence[ModuleOverride], modules: Sequence[str]) -> tuple[str, str] | None:
    """The first glob that matches none of `modules` and what to say about it, or None."""
    for override in overrides:
        if not any(fnmatch.fnmatchcase(m, override.module) for m in modules):
            shown = ", ".join(modules[:12]) + (", ..." if len(modules) > 12 else "")
            hint = did_you_mean(override.module, list(modules))
            return override.module, f"matches no module of the model{hint} (its modules: {shown})"
    return None
