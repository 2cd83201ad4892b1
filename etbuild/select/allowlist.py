"""The operator allowlist: a product may call only the operators its recipe allows.

An entry is an exact name (`aten::add.out`), an fnmatch glob (`aten::*conv*`), or
`@path/to/file.txt` naming a file (relative to `base_dir`; a loaded recipe's entries are
already absolute) with one name or glob per line and `#` comments.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path

from etbuild.errors import RecipeError, StageError
from etbuild.select.selection import OperatorUse, Selection

KEY = "operators.allow"
SOURCES_SHOWN = 3
_GLOB_CHARS = frozenset("*?[")


def parse_allowlist(allow: Sequence[str], base_dir: str | Path, where: str) -> tuple[str, ...]:
    """The names and globs of `allow`, `@file` entries read from files under base_dir."""
    patterns: list[str] = []
    for entry in allow:
        if entry.startswith("@"):
            patterns.extend(_read_file(Path(base_dir) / entry[1:], entry, where))
        else:
            patterns.append(_checked(entry, where))
    return tuple(patterns)


def _read_file(path: Path, entry: str, where: str) -> list[str]:
    if not path.is_file():
        raise RecipeError(f"{where}: {KEY}: {entry}: no such file {path}")
    patterns = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if text:
            patterns.append(_checked(text, f"{path}:{lineno}"))
    return patterns


def _checked(pattern: str, where: str) -> str:
    if "::" not in pattern and not _GLOB_CHARS & set(pattern):
        raise RecipeError(
            f"{where}: {KEY}: {pattern!r} is neither an operator name "
            "('namespace::op.overload', e.g. 'aten::add.out') nor a glob (e.g. 'aten::*conv*')"
        )
    return pattern


def allowed(name: str, patterns: Sequence[str]) -> bool:
    """Whether an operator name matches any exact name or glob."""
    return any(name == p or fnmatch.fnmatchcase(name, p) for p in patterns)


def check_allowed(
    selection: Selection, allow: Sequence[str], where: str, base_dir: str | Path = "."
) -> None:
    """Raise StageError listing every operator the selection calls outside the allowlist.

    where: the recipe position of the allowlist (`recipes/kws.yaml:14:3`); base_dir: the
    recipe's directory, for `@file` entries and for shortening source paths.
    """
    patterns = parse_allowlist(allow, base_dir, where)
    outside = [op for op in selection.operators if not allowed(op.name, patterns)]
    if outside:
        lines = "\n".join(f"  {describe_use(op, base_dir)}" for op in outside)
        raise StageError(f"{where}: {KEY}: the program calls operators outside the allowlist:\n{lines}\n"
                         f"  add them to {KEY}, change the model so it does not call them, or leave them to a backend")


def describe_use(op: OperatorUse, base_dir: str | Path | None = None) -> str:
    """`aten::convolution.out (6 calls) from features.0 (Conv1d) at model.py:31: …; …`."""
    text = f"{op.name} ({op.count} call{'s' * (op.count != 1)})"
    sources = op.sources
    if not sources:
        return text
    shown = "; ".join(s.describe(Path(base_dir).resolve() if base_dir else None) for s in sources[:SOURCES_SHOWN])
    more = len(sources) - SOURCES_SHOWN
    return f"{text} from {shown}" + (f"; … and {more} more" if more > 0 else "")
