"""doit tasks for recipes: one task per stage and recipe, named `stage:recipe`.

Each task reads and writes files under `build/<recipe>/`. It is up to date when the files
it reads (doit's `file_dep`, by content) and a key made of exactly the recipe fields it
reads plus the etbuild and torch versions (`config_changed`) are unchanged. Editing
`verify.atol` re-runs verify only; editing `memory` re-runs plan and what follows.

A recipe with a `quantize:` section has a quantize task between export and lower, keyed on
that section (and `model`, and the `verify.samples`/`verify.seed` its accuracy gate is
measured on), with the calibration file among its file deps: changing the calibration data
re-runs quantize and what follows, never export. Lower then reads `quantized/<method>.pt2`
instead of `export/<method>.pt2`. A recipe without one has no quantize task.

Lowering dumps (`dump_after`) are extra targets of the lower task, not part of its key: a
missing dump makes lower run once more (its output bytes are the same, so plan and what
follows stay up to date), and a build without dumps leaves lower up to date. Each lower run
empties `dump/` first, so no dump outlives the lowering it shows.

A failing stage returns a `StageFailure` carrying its one-paragraph message: doit hands the
task's result back to the parent process under `-n`, so a parallel build reports failures
as a serial one does.
"""

from __future__ import annotations

import hashlib
import os
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from doit.exceptions import TaskFailed
from doit.tools import config_changed

import etbuild
from etbuild.errors import EtbuildError
from etbuild.recipe import Recipe

STAGES = ("export", "quantize", "lower", "plan", "emit", "select", "verify")


class StageFailure(TaskFailed):
    """A stage's etbuild error as doit's task result: `message` is the one paragraph to report
    (all that doit's own reporter prints), `trace` the traceback for `--debug`. Both are text,
    so they travel from a worker process to the parent."""

    def __init__(self, exc: EtbuildError) -> None:
        super().__init__(str(exc))
        self.trace = "".join(traceback.format_exception(exc))


@dataclass(frozen=True)
class Artifacts:
    """The files of one recipe's build."""

    root: Path
    name: str
    methods: tuple[str, ...]

    @classmethod
    def of(cls, recipe: Recipe, build_root: Path) -> Artifacts:
        return cls(build_root / recipe.name, recipe.name, tuple(m.name for m in recipe.model.methods))

    @property
    def exports(self) -> dict[str, Path]:
        return {m: self.root / "export" / f"{m}.pt2" for m in self.methods}

    @property
    def quantized(self) -> dict[str, Path]:
        return {m: self.root / "quantized" / f"{m}.pt2" for m in self.methods}

    @property
    def layers(self) -> Path:
        """The quantize stage's report (per-layer SNR, schemes, weight bytes)."""
        return self.root / "quantized" / "layers.json"

    @property
    def quantize_report(self) -> Path:
        """`quantize.json` beside the `.pte`: the quantize stage's report with the program's checks and sizes."""
        return self.root / "quantize.json"

    @property
    def lowered(self) -> Path:
        """The unplanned program: the `.pte` format, but an intermediate, so not named `.pte`."""
        return self.root / "lowered.unplanned"

    @property
    def dump_dir(self) -> Path:
        return self.root / "dump"

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def memory(self) -> list[Path]:
        return [self.plan, self.root / "memory.json", self.root / "memory.svg"]

    @property
    def pte(self) -> Path:
        return self.root / f"{self.name}.pte"

    @property
    def select(self) -> list[Path]:
        return [self.root / "select.json", self.root / "selected_operators.yaml", self.runtime_zip]

    @property
    def runtime_zip(self) -> Path:
        return self.root / "runtime" / f"{self.name}-runtime.zip"

    @property
    def verify(self) -> Path:
        return self.root / "verify.json"


def code_version() -> str:
    """etbuild's version plus a digest of its source, and torch's version."""
    digest = hashlib.sha256()
    package_root = Path(etbuild.__file__).resolve().parent.parent
    for folder in ("etbuild", "runtime", "kernels", "backends", "schema"):
        for path in sorted((package_root / folder).rglob("*")):
            if path.suffix in (".py", ".fbs", ".json", ".j2") and "__pycache__" not in path.parts:
                digest.update(path.relative_to(package_root).as_posix().encode())
                digest.update(path.read_bytes())
    return f"etbuild {etbuild.__version__}+{digest.hexdigest()[:12]}, torch {metadata.version('torch')}"


def _key(recipe: Recipe, sections: tuple[str, ...], version: str) -> dict[str, Any]:
    """The versions and the recipe fields a stage reads: whole sections, or `section.field`."""
    return {"versions": version, **{s: _field(recipe, s) for s in sections}}


def _field(recipe: Recipe, name: str) -> Any:
    section, _, field = name.partition(".")
    return recipe.section(section)[field] if field else recipe.section(section)


def _action(task_name: str, fn: Callable[..., None], *args: Any) -> Callable[[], Any]:
    """A doit python-action: an etbuild error becomes a StageFailure (one paragraph); success
    returns `{"seconds": …}`, the time measured where the stage ran (a worker under `-n`)."""
    creator = os.getpid()

    def run() -> Any:
        if os.getpid() != creator:
            _worker_threads()
        start = time.perf_counter()
        try:
            fn(*args)
        except EtbuildError as exc:
            return StageFailure(exc)
        return {"seconds": time.perf_counter() - start}

    run.__name__ = task_name
    return run


def _worker_threads() -> None:
    """In a worker forked by `doit -n`, run torch on one thread: the workers share the cores,
    and an OpenMP pool inherited from the parent hangs at its first parallel region."""
    import torch

    torch.set_num_threads(1)


def model_files(recipe: Recipe) -> list[Path]:
    """Files the model stage reads besides the recipe: weights and a path-based factory."""
    files = [recipe.model.weights] if recipe.model.weights else []
    source = recipe.model.factory.rsplit(":", 1)[0]
    if source.endswith(".py"):
        files.append(Path(source))  # file factories are absolute once loaded
    return files


def calibration_files(recipe: Recipe) -> list[Path]:
    """The calibration data the quantize stage reads, if the recipe names a file."""
    data = recipe.quantize.calibration.data if recipe.quantize else None
    return [data] if data is not None else []


def allowlist_files(recipe: Recipe) -> list[Path]:
    """Allowlist files the select stage reads (`allow: file.txt` or `@file.txt` entries)."""
    return list(recipe.operators.files)


def recipe_tasks(
    recipe: Recipe, build_root: Path, version: str, dump_after: Sequence[str] = ()
) -> Iterator[dict[str, Any]]:
    """The task dicts of one recipe, in stage order; `dump_after` names lowering steps to dump."""
    from etbuild.stages import emit, export, lower, plan, quantize, select, verify

    a = Artifacts.of(recipe, build_root)
    model_deps = [str(p) for p in model_files(recipe)]
    exports = [str(p) for p in a.exports.values()]
    quantized = recipe.quantize is not None
    methods = a.quantized if quantized else a.exports
    lower_in = [str(p) for p in methods.values()]
    reports = [a.layers, *methods.values()] if quantized else []
    quantized_reports = (methods, a.layers, a.quantize_report) if quantized else ()
    dumps = list(lower.dump_files(a.dump_dir, dump_after).values())
    # stage -> (action, its arguments, files it reads, files it writes, recipe sections it reads)
    specs: dict[str, tuple[Callable[..., None], tuple[Any, ...], list[str], list[Any], tuple[str, ...]]] = {
        "export": (export.run_export, (recipe, a.exports), model_deps, exports, ("model",)),
        "quantize": (
            quantize.run_quantize, (recipe, a.exports, a.quantized, a.layers),
            [*exports, *map(str, calibration_files(recipe))], [*a.quantized.values(), a.layers],
            ("model", "quantize", "verify.samples", "verify.seed"),
        ),
        "lower": (lower.run_lower, (methods, a.lowered, a.dump_dir, dump_after), lower_in, [a.lowered, *dumps], ()),
        "plan": (plan.run_plan, (a.lowered, recipe.memory, a.root), [str(a.lowered)], a.memory, ("memory",)),
        "emit": (emit.run_emit, (a.lowered, a.plan, a.pte), [str(a.lowered), str(a.plan)], [a.pte], ()),
        "select": (
            select.run_select, (recipe, a.pte, a.lowered, a.root),
            [str(a.pte), str(a.lowered), *map(str, allowlist_files(recipe))], a.select, ("operators",),
        ),
        "verify": (
            verify.run_verify, (recipe, a.pte, a.runtime_zip.parent, a.verify, *quantized_reports),
            [str(a.pte), str(a.runtime_zip), *model_deps, *map(str, reports)],
            [a.verify, *([a.quantize_report] if quantized else [])], ("model", "quantize", "verify"),
        ),
    }
    for stage in STAGES:
        if stage == "quantize" and not quantized:
            continue
        fn, args, deps, targets, sections = specs[stage]
        name = f"{stage}:{recipe.name}"
        yield {
            "basename": stage, "name": recipe.name, "doc": f"{stage} {recipe.path}",
            "actions": [_action(name, fn, *args)], "file_dep": deps, "targets": [str(t) for t in targets],
            "uptodate": [config_changed(_key(recipe, sections, version))], "clean": True,
        }
