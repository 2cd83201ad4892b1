"""doit tasks for recipes: one task per stage and recipe, named `stage:recipe`.

`stage_calls` is the table of stages: for each, the function, its arguments, the files it
reads (outputs of earlier stages, and source files the recipe names), the files and
directories it writes, and the recipe sections it reads. A new stage is one entry there and
one name in `STAGES`.

Each task reads and writes files under `build/<recipe>/`. It is up to date when the files
it reads (doit's `file_dep`, by content) and a key made of exactly the recipe sections it
reads plus etbuild's source digest and the tool versions (`config_changed`) are unchanged.
Editing `verify.atol` re-runs verify only; editing `memory` re-runs plan and what follows.
A section name `section.field` keys on that one field.
A task that does run goes through a `StageRunner` (`etbuild.stagerun`), which may fetch its
outputs from a shared cache or run it on another machine.

A recipe with a `quantize:` section has a quantize stage between export and lower, keyed on
that section (with the calibration file's bytes), `model`, and the `verify.samples` and
`verify.seed` its per-layer report is measured on: changing the calibration data re-runs
quantize and what follows, never export. Lower then reads `quantized/<method>.pt2` instead of
`export/<method>.pt2`. A recipe without one has no quantize stage.

Lowering dumps (`dump_after`) are extra targets of the lower task, not part of its key: a
missing dump makes lower run once more (its output bytes are the same, so plan and what
follows stay up to date), and a build without dumps leaves lower up to date. Each lower run
empties `dump/` first, so no dump outlives the lowering it shows.

A failing stage returns a `StageFailure` carrying its one-paragraph message and exit code:
doit hands the task's result back to the parent process under `-n`, so a parallel build
reports failures as a serial one does.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doit.exceptions import TaskFailed
from doit.tools import config_changed

from etbuild.errors import EtbuildError
from etbuild.lowering.partition_report import PARTITION_FILES
from etbuild.recipe import Recipe

if TYPE_CHECKING:
    from etbuild.stagerun import StageRunner

STAGES = ("export", "quantize", "lower", "plan", "emit", "select", "verify")


class StageFailure(TaskFailed):
    """A stage's etbuild error as doit's task result: `message` is the one paragraph to report
    (all that doit's own reporter prints), `exit_code` the error's, `trace` the traceback for
    `--debug`. All are plain values, so they travel from a worker process to the parent."""

    def __init__(self, message: str, exit_code: int = 1, trace: str = "") -> None:
        super().__init__(message)
        self.exit_code, self.trace = exit_code, trace

    @classmethod
    def of(cls, exc: EtbuildError) -> StageFailure:
        return cls(str(exc), exc.exit_code, "".join(traceback.format_exception(exc)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (StageFailure, (self.message, self.exit_code, self.trace))


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

    def partition(self, recipe: Recipe) -> list[Path]:
        """partition.json and partition.svg, written when the recipe names backends."""
        return [self.root / f for f in PARTITION_FILES] if recipe.backends else []

    @property
    def debug_map(self) -> Path:
        """Which graph node each value of the lowered program holds (not part of the program)."""
        return self.root / "lowered.debug.json"

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
    def runtime_dir(self) -> Path:
        return self.root / "runtime"

    @property
    def runtime_zip(self) -> Path:
        return self.runtime_dir / f"{self.name}-runtime.zip"

    @property
    def runtime_package(self) -> Path:
        return self.runtime_dir / "etbuild"

    @property
    def verify(self) -> Path:
        return self.root / "verify.json"


@dataclass(frozen=True)
class StageCall:
    """One stage of one recipe: what runs, what it reads and what it writes.

    reads: files under the recipe's build directory `root` (earlier stages' outputs).
    outputs: files and directories under `root` that make its result (what a cache stores).
    extra: files it writes that are not part of its result (lowering dumps); a call with
    extras always runs.
    """

    stage: str
    recipe: Recipe
    root: Path
    fn: Callable[..., None]
    args: tuple[Any, ...]
    reads: tuple[Path, ...]
    outputs: tuple[Path, ...]
    sections: tuple[str, ...]
    extra: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.stage}:{self.recipe.name}"

    @property
    def sources(self) -> tuple[Path, ...]:
        """The source files (outside the build directory) that the sections it reads name."""
        return tuple(f for s in self.sections for f in SECTION_FILES.get(s, lambda r: [])(self.recipe))

    def run(self) -> None:
        self.fn(*self.args)


def model_files(recipe: Recipe) -> list[Path]:
    """Files the model stage reads besides the recipe: weights and a path-based factory."""
    files = [recipe.model.weights] if recipe.model.weights else []
    source = recipe.model.factory.rsplit(":", 1)[0]
    if source.endswith(".py"):
        files.append(Path(source))  # file factories are absolute once loaded
    return files


def allowlist_files(recipe: Recipe) -> list[Path]:
    """Allowlist files the select stage reads (`allow: file.txt` or `@file.txt` entries)."""
    return list(recipe.operators.files)


def calibration_files(recipe: Recipe) -> list[Path]:
    """The calibration data file of `quantize`, if the recipe names one."""
    data = recipe.quantize.calibration.data if recipe.quantize else None
    return [data] if data else []


SECTION_FILES: dict[str, Callable[[Recipe], list[Path]]] = {
    "model": model_files, "operators": allowlist_files, "quantize": calibration_files,
}
"""Recipe section -> the files it names: a stage reading the section reads them too."""


def stage_calls(recipe: Recipe, a: Artifacts, dump_after: Sequence[str] = ()) -> dict[str, StageCall]:
    """Every stage of one recipe, in STAGES order (quantize only when the recipe has the
    section); `dump_after` names lowering steps to dump."""
    from etbuild.stages import emit, export, lower, plan, quantize, select, verify

    exports = tuple(a.exports.values())
    methods = a.quantized if recipe.quantize else a.exports
    q_args = (methods, a.layers, a.quantize_report) if recipe.quantize else ()
    q_reads = (a.layers,) if recipe.quantize else ()
    dumps = tuple(lower.dump_files(a.dump_dir, dump_after).values())

    def call(stage: str, fn: Callable[..., None], args: tuple[Any, ...], reads: Sequence[Path],
             outputs: Sequence[Path], sections: tuple[str, ...], extra: tuple[Path, ...] = ()) -> StageCall:
        return StageCall(stage, recipe, a.root, fn, args, tuple(reads), tuple(outputs), sections, extra)

    calls = [
        call("export", export.run_export, (recipe, a.exports), (), exports, ("model",)),
        call("quantize", quantize.run_quantize, (recipe, a.exports, a.quantized, a.layers), exports,
             [*a.quantized.values(), a.layers], ("model", "quantize", "verify.samples", "verify.seed")),
        call("lower", lower.run_lower, (methods, a.lowered, a.debug_map, a.dump_dir, dump_after, recipe.backends),
             tuple(methods.values()), [a.lowered, a.debug_map, *a.partition(recipe)], ("backends",), dumps),
        call("plan", plan.run_plan, (a.lowered, recipe.memory, a.root), [a.lowered], a.memory, ("memory",)),
        call("emit", emit.run_emit, (a.lowered, a.plan, a.pte), [a.lowered, a.plan], [a.pte], ()),
        call("select", select.run_select, (recipe, a.pte, a.lowered, a.root), [a.pte, a.lowered],
             [*a.select, a.runtime_package], ("operators",)),
        call("verify", verify.run_verify, (recipe, a.pte, a.runtime_zip, a.verify, methods, a.debug_map, *q_args),
             [a.pte, a.runtime_zip, *methods.values(), a.debug_map, *q_reads], [a.verify, *q_args[2:]],
             ("model", "quantize", "verify")),
    ]
    return {c.stage: c for c in calls if c.stage != "quantize" or recipe.quantize}


def task_dict(call: StageCall, runner: StageRunner) -> dict[str, Any]:
    """The doit task of one stage call."""
    deps = [*call.reads, *call.sources]
    return {
        "basename": call.stage, "name": call.recipe.name, "doc": f"{call.stage} {call.recipe.path}",
        "actions": [_action(call, runner)], "file_dep": [str(p) for p in deps],
        "targets": [str(t) for t in (*call.outputs, *call.extra)],
        "uptodate": [config_changed(runner.fields(call))], "clean": True,
    }


def recipe_tasks(
    recipe: Recipe, build_root: Path, runner: StageRunner, dump_after: Sequence[str] = ()
) -> Iterator[dict[str, Any]]:
    """The task dicts of one recipe, in stage order."""
    calls = stage_calls(recipe, Artifacts.of(recipe, build_root), dump_after)
    for stage in STAGES:
        if stage in calls:
            yield task_dict(calls[stage], runner)


def _action(call: StageCall, runner: StageRunner) -> Callable[[], Any]:
    """A doit python-action: an etbuild error becomes a StageFailure (one paragraph); success
    returns the runner's report (`seconds`, measured where the stage ran, and `cache`)."""
    creator = os.getpid()

    def run() -> Any:
        if os.getpid() != creator:
            _worker_threads()
        start = time.perf_counter()
        try:
            report = runner.run(call)
        except EtbuildError as exc:
            return StageFailure.of(exc)
        return {"seconds": time.perf_counter() - start, **report}

    run.__name__ = call.name
    return run


def _worker_threads() -> None:
    """In a worker forked by `doit -n`, run torch on one thread: the workers share the cores,
    and an OpenMP pool inherited from the parent hangs at its first parallel region."""
    import torch

    torch.set_num_threads(1)
