"""Runs the doit tasks of chosen recipes, reporting each stage as an event.

    result = build([Path("recipes/mlp.yaml")], build_root=Path("build"))
    result.executed   # ["export:mlp", "lower:mlp", ...] — tasks that actually ran
    build(paths, jobs=2)                         # doit's process mode: stages of different recipes at once
    build(paths, dump_after=["fold-constants"])  # also write build/<recipe>/dump/02-fold-constants.py
    build(paths, cache=open_cache("s3://…"))     # fetch stage outputs another machine built

A build holds its tree's lock (`etbuild.build.state`): a second build of the same tree waits,
then reuses what the first one built. doit's records are committed per task, so a killed
build resumes where it stopped; a torn record file and leftover temporary files are removed
with a note.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from doit.cmd_base import ModuleTaskLoader
from doit.doit_cmd import DoitMain
from doit.exceptions import UnmetDependency

from etbuild.build import shared_weights
from etbuild.build.progress import Event, Sink, TextSink, event
from etbuild.build.stage_table import STAGES
from etbuild.build.stagerun import Executor, StageRunner
from etbuild.build.state import BACKEND, DOIT_PLUGINS, STATE_FILE, MD5Checker, prepared_tree
from etbuild.build.tasks import StageFailure, recipe_tasks
from etbuild.cache import Cache, versions
from etbuild.errors import InternalError, RecipeError, StageError, UsageError
from etbuild.recipe import Recipe, load_recipe


@dataclass
class BuildResult:
    """What a build did: tasks run, up to date, failed (message, exit code) and not run because
    a stage before them failed (`blocked`), cache outcomes, notes."""

    executed: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    failed_codes: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cache: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    exit_code: int = 0

    @property
    def rebuilt(self) -> list[str]:
        """Tasks whose stage function ran here or on a worker (not restored from the cache)."""
        return [t for t in self.executed if t not in self.failed and self.cache.get(t) != "hit"]

    def error_code(self, order: Sequence[str]) -> int:
        """The exit code of the first failure in task order (recipes as given, stages in order)."""
        for name in order:
            if name in self.failed_codes:
                return self.failed_codes[name]
        return InternalError.exit_code if self.failed or self.exit_code else 0


class StageReporter:
    """A doit reporter: turns doit's callbacks into events for a Sink, and records a BuildResult."""

    result: BuildResult
    sink: Sink

    def __init__(self, outstream: TextIO, options: dict[str, Any]) -> None:
        pass

    def initialize(self, tasks: Any, selected_tasks: Any) -> None:
        pass

    def get_status(self, task: Any) -> None:
        pass

    def emit(self, ev: Event) -> None:
        if ev["event"] == "note":
            self.result.notes.append(ev["message"])
        self.sink.emit(ev)

    def execute_task(self, task: Any) -> None:
        self.emit(event("start", task.name))

    def add_success(self, task: Any) -> None:
        values = task.values
        self.result.executed.append(task.name)
        self.result.seconds[task.name] = values.get("seconds", 0.0)
        self.result.cache[task.name] = values.get("cache", "off")
        self.emit(event("end", task.name, seconds=values.get("seconds", 0.0), cache=values.get("cache", "off")))
        if values.get("note"):  # after the stage's line, which a serial text sink left open
            self.emit(event("note", message=values["note"]))

    def add_failure(self, task: Any, fail: Any) -> None:
        if isinstance(fail, UnmetDependency):  # a stage before it failed: the recipe's own failure says why
            self.result.blocked.append(task.name)
            self.emit(event("blocked", task.name, after=str(fail.get_msg()).strip()))
            return
        self.result.executed.append(task.name)
        known = isinstance(fail, StageFailure)
        message = fail.message if known else fail.get_msg()
        code = fail.exit_code if known else InternalError.exit_code
        self.result.failed[task.name], self.result.failed_codes[task.name] = message, code
        self.emit(event("fail", task.name, message=message, exit_code=code, internal=not known,
                        trace=fail.trace if known else ""))

    def skip_uptodate(self, task: Any) -> None:
        if not task.name.startswith("_"):
            self.result.up_to_date.append(task.name)
            self.emit(event("up-to-date", task.name))

    def skip_ignore(self, task: Any) -> None:
        pass

    def cleanup_error(self, exception: Any) -> None:
        self.emit(event("note", message=f"error: {exception.get_msg()}"))

    def runtime_error(self, msg: str) -> None:
        self.emit(event("note", message=f"error: {msg}"))

    def teardown_task(self, task: Any) -> None:
        pass

    def complete_run(self) -> None:
        pass


def doit_namespace(
    recipes: Sequence[Recipe], build_root: Path, reporter: type | None = None, dump_after: Sequence[str] = (),
    runner: StageRunner | None = None,
) -> dict[str, Any]:
    """A doit module namespace: DOIT_CONFIG plus one `task_<stage>` creator per stage."""
    runner = runner or StageRunner(versions())
    build_root.mkdir(parents=True, exist_ok=True)  # sqlite creates its file, not the folder
    tasks = [t for r in recipes for t in recipe_tasks(r, build_root, runner, dump_after)]
    namespace: dict[str, Any] = {
        "DOIT_CONFIG": {
            "dep_file": str(build_root / STATE_FILE), "backend": BACKEND, "check_file_uptodate": MD5Checker,
            "verbosity": 0,
            "default_tasks": [f"verify:{r.name}" for r in recipes],
            "continue": True,  # one recipe's failure does not stop the others
            **({"reporter": reporter} if reporter else {}),
        }
    }
    for stage in STAGES:
        stage_tasks = [t for t in tasks if t["basename"] == stage]
        namespace[f"task_{stage}"] = _creator(stage, stage_tasks)
    return namespace


def _creator(stage: str, tasks: list[dict[str, Any]]) -> Any:
    def create() -> Any:
        yield {"basename": stage, "name": None, "doc": f"the {stage} stage of every recipe"}
        for t in tasks:
            yield {k: v for k, v in t.items() if k != "basename"}

    create.__name__ = f"task_{stage}"
    return create


def build(
    recipe_paths: Sequence[Path], build_root: Path = Path("build"), *, debug: bool = False,
    stream: TextIO | None = None, jobs: int = 1, dump_after: Sequence[str] = (), sink: Sink | None = None,
    cache: Cache | None = None, executor: Executor | None = None,
) -> BuildResult:
    """Build (export … verify) every recipe given, running only tasks that are out of date.

    `jobs` > 1 runs that many stages at once: in worker processes, or in threads that wait
    for an `executor`'s machines. `dump_after` names lowering steps (or `all`) whose form is
    written to `build/<recipe>/dump/`; an unknown name is a UsageError listing the steps.
    `cache` fetches and stores stage outputs by key; `executor` runs stages elsewhere (it
    needs a cache, through which inputs and outputs travel). Events go to `sink` (default:
    text lines on `stream`). `exit_code` is the first failure's (recipes as given, stages in order).
    """
    if jobs < 1:
        raise UsageError(f"jobs is {jobs}; expected 1 or more")
    if executor is not None and cache is None:
        raise UsageError("running stages on other machines needs a shared cache (--cache)")
    steps = _lowering_steps(dump_after)
    recipes = [load_recipe(p) for p in recipe_paths]
    _check_unique(recipes)
    result = BuildResult()
    sink = sink or TextSink(stream or sys.stdout, parallel=jobs > 1, debug=debug)
    reporter = type("Reporter", (StageReporter,), {"result": result, "sink": sink})
    runner = StageRunner(versions(), cache, executor)

    def say(message: str) -> None:
        result.notes.append(message)
        sink.emit(event("note", message=message))

    with prepared_tree(build_root, say):
        targets = [f"verify:{r.name}" for r in recipes]
        loader = ModuleTaskLoader(doit_namespace(recipes, build_root, reporter, steps, runner))
        parallel = ["-n", str(jobs), *(["-P", "thread"] if executor else [])] if jobs > 1 else []
        result.exit_code = DoitMain(loader, extra_config=DOIT_PLUGINS).run(["run", *parallel, *targets])
        _check_shared_weights(recipes, build_root, result, say)
    sink.close()
    order = [f"{stage}:{r.name}" for r in recipes for stage in STAGES]
    result.exit_code = result.error_code(order)
    return result


def _check_shared_weights(recipes: Sequence[Recipe], build_root: Path, result: BuildResult,
                          say: Callable[[str], None]) -> None:
    """A key two recipes' shared weights file holds with different values fails the later recipe's emit."""
    for recipe, message in shared_weights.conflicts(recipes, build_root):
        task = f"emit:{recipe}"
        result.failed[task] = message
        result.failed_codes[task] = StageError.exit_code
        say(f"error: {message}")


def _lowering_steps(dump_after: Sequence[str]) -> tuple[str, ...]:
    """The lowering steps to dump; the pipeline (and torch) is imported only when some are asked for."""
    if not dump_after:
        return ()
    from etbuild.stages.lower import LOWERING

    return LOWERING.select(dump_after)


def _check_unique(recipes: Sequence[Recipe]) -> None:
    seen: dict[str, Path] = {}
    for r in recipes:
        if r.name in seen:
            raise RecipeError(f"{r.path}: recipe name {r.name!r} is already used by {seen[r.name]}")
        seen[r.name] = r.path
