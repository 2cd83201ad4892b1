"""Runs one stage call: from a shared cache when it holds the result, else here or on an executor.

    runner = StageRunner(versions(), cache=open_cache("build-cache"))
    runner.run(call)   # {"cache": "hit" | "miss" | "corrupt" | "off", "key": …}

The key (`etbuild.cache.keys.stage_key`) covers the stage, etbuild's source and the tool
versions, the recipe sections the stage reads (file paths replaced by the files' digests) and
the digests of the build files it reads. A corrupt entry is discarded, the stage rebuilt and
stored again, and the report says so (`note`). An executor (`etbuild.build.remote`) runs the stage
elsewhere and stores its outputs in the cache, from which they are restored here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from etbuild.build.stage_table import StageCall
from etbuild.cache import Cache, CorruptEntry, portable, stage_key
from etbuild.errors import StageError
from etbuild.fsutil import sha256_file
from etbuild.recipe import Recipe


class Executor(Protocol):
    """Runs a stage call elsewhere; its outputs end in `runner.cache` under `key`."""

    def run(self, call: StageCall, key: str, runner: StageRunner) -> None: ...


def file_digest(path: Path) -> str:
    """sha256 of a file, or `missing` (the stage itself then reports the missing file)."""
    try:
        return sha256_file(path)
    except FileNotFoundError:
        return "missing"


def section_field(recipe: Recipe, name: str) -> Any:
    """A whole recipe section, or one field of it for `section.field`."""
    section, _, field_name = name.partition(".")
    data = recipe.section(section)
    return data[field_name] if field_name else data


@dataclass
class StageRunner:
    """How stage calls run in one build: the versions in every key, a cache, an executor."""

    versions: dict[str, str]
    cache: Cache | None = None
    executor: Executor | None = None
    _sources: dict[Path, str] = field(default_factory=dict, repr=False)

    def source_digests(self, call: StageCall) -> dict[str, str]:
        """Absolute posix path -> sha256 of each source file the call's sections name."""
        for path in call.sources:
            if path not in self._sources:
                self._sources[path] = file_digest(path)
        return {p.resolve().as_posix(): self._sources[p] for p in call.sources}

    def fields(self, call: StageCall) -> dict[str, Any]:
        """The versions and the recipe sections the call reads, file paths as digests: doit's key."""
        sections = {s: section_field(call.recipe, s) for s in call.sections}
        return {"versions": self.versions, "sections": portable(sections, self.source_digests(call))}

    def key(self, call: StageCall) -> str:
        """The cache key of the call, from its fields and the digests of the build files it reads."""
        inputs = {p.relative_to(call.root).as_posix(): file_digest(p) for p in call.reads}
        return stage_key(call.stage, self.versions, self.fields(call)["sections"], inputs)

    def run(self, call: StageCall) -> dict[str, Any]:
        """Run or restore the call; what happened (`cache`, `key`, and a `note` on a corrupt entry)."""
        if self.cache is None:
            self._execute(call, None)
            return {"cache": "off"}
        key, note = self.key(call), None
        if not call.extra:
            try:
                if self.cache.restore(key, call.root) is not None:
                    return {"cache": "hit", "key": key}
            except CorruptEntry as exc:
                self.cache.discard(key, exc)
                note = f"cache entry {key[:16]} of {call.name} was corrupt ({exc}): discarded and rebuilt"
        self._execute(call, key)
        return {"cache": "corrupt", "key": key, "note": note} if note else {"cache": "miss", "key": key}

    def _execute(self, call: StageCall, key: str | None) -> None:
        """Run the call here, or on the executor (calls with extra outputs always run here)."""
        if self.executor is not None and self.cache is not None and key is not None and not call.extra:
            self.executor.run(call, key, self)
            try:
                self.cache.restore(key, call.root)
            except CorruptEntry as exc:
                raise StageError(f"{call.name}: the outputs a worker stored are unreadable: {exc}") from None
            return
        call.run()
        if self.cache is not None and key is not None:
            self.cache.save(key, call.stage, call.root, call.outputs)
