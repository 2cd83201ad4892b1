"""doit tasks for recipes: one task per stage call of the stage table, named `stage:recipe`.

Each task reads and writes files under `build/<recipe>/`. It is up to date when the files
it reads (doit's `file_dep`, by content) and a key made of exactly the recipe sections it
reads plus etbuild's source digest and the tool versions (`config_changed`) are unchanged.
Editing `verify.atol` re-runs verify only; editing `memory` re-runs plan and what follows.
A task that does run goes through a `StageRunner` (`etbuild.build.stagerun`), which may fetch its
outputs from a shared cache or run it on another machine.

Lowering dumps are extra targets of the lower task, not part of its key: a missing dump makes
lower run once more (its output bytes are the same, so plan and what follows stay up to date),
and a build without dumps leaves lower up to date. Each lower run empties `dump/` first, so no
dump outlives the lowering it shows.

A failing stage returns a `StageFailure` carrying its one-paragraph message and exit code:
doit hands the task's result back to the parent process under `-n`, so a parallel build
reports failures as a serial one does.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from doit.exceptions import TaskFailed
from doit.tools import config_changed

from etbuild.build.layout import Artifacts
from etbuild.build.stage_table import STAGES, StageCall, stage_calls
from etbuild.build.stagerun import StageRunner
from etbuild.errors import EtbuildError
from etbuild.recipe import Recipe


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
    returns the runner's report (`seconds`, measured where the stage ran, and `cache`). The stage's
    module is imported before the clock starts: `seconds` is the stage's work, not torch's import."""
    creator = os.getpid()

    def run() -> Any:
        if os.getpid() != creator:
            _worker_threads()
        call.fn.load()
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
