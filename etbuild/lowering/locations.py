"""Where a program's call came from: the source line and module path lowering recorded in its frames.

Torch-free: lowering writes these frames into the program, selective build and verification
read them back to name where an operator is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from etbuild.runtime.format import program as fb


@dataclass(frozen=True)
class SourceLocation:
    """Where a call came from: the model source line and the module path that produced it."""

    filename: str
    lineno: int
    module: str  # "features.0 (Conv1d)"; "" when the node had no module stack
    code: str  # the source line, stripped

    @classmethod
    def from_frame(cls, frame: fb.Frame) -> SourceLocation:
        return cls(frame.filename or "", frame.lineno, frame.name or "", (frame.context or "").strip())

    def describe(self, base_dir: str | PurePath | None = None) -> str:
        """`features.0 (Conv1d) at model.py:31: x = self.conv(x)`; just the module path when
        the node carried no stack trace."""
        if self.lineno <= 0:
            return self.module or "an unknown source"
        where = f"{short_path(self.filename, base_dir)}:{self.lineno}"
        text = f"{self.module} at {where}" if self.module else where
        return f"{text}: {self.code}" if self.code else text


def short_path(filename: str, base_dir: str | PurePath | None = None) -> str:
    """A path as people read it: relative to base_dir, else from `site-packages/` on."""
    path = PurePath(filename)
    if base_dir is not None and path.is_relative_to(base_dir):
        return path.relative_to(base_dir).as_posix()
    marker = "site-packages/"
    text = path.as_posix()
    return text.rsplit(marker, 1)[1] if marker in text else text
