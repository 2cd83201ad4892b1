"""Runs the doit tasks of chosen recipes, reporting each stage with its time.

    result = build([Path("recipes/mlp.yaml")], build_root=Path("build"))
    result.executed   # ["export:mlp", "lower:mlp", ...] — tasks that actually ran
    build(paths, jobs=2)                         # doit's process mode: stages of different recipes at once
    build(paths, dump_after=["fold-constants"])  # also write build/<recipe>/dump/02-fold-constants.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from doit.cmd_base import ModuleTaskLoader
from doit.doit_cmd import DoitMain

from etbuild.errors import RecipeError, UsageError
from etbuild.recipe import Recipe, load_recipe
from etbuild.tasks import STAGES, StageFailure, code_version, recipe_tasks


@dataclass
class BuildResult:
    """What a build did: tasks run, tasks up to date, failures with their messages."""

    executed: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    exit_code: int = 0


class StageReporter:
    """A doit reporter: one line per stage with its time; failures as one paragraph.

    In serial a stage's line starts when it starts (`lower:mlp ...`) and ends with its time;
    with parallel jobs each line is written whole when its stage ends.
    """

    result: BuildResult
    stream: TextIO
    debug: bool = False
    parallel: bool = False

    def __init__(self, outstream: TextIO, options: dict[str, Any]) -> None:
        self._start: dict[str, float] = {}

    def initialize(self, tasks: Any, selected_tasks: Any) -> None:
        pass

    def get_status(self, task: Any) -> None:
        pass

    def execute_task(self, task: Any) -> None:
        self._start[task.name] = time.perf_counter()
        if not self.parallel:
            print(f"  {task.name:<32} ...", end="", file=self.stream, flush=True)

    def _end_line(self, task: Any, status: str) -> None:
        """End the stage's line (serial), or write it whole (parallel)."""
        print(f"  {task.name:<32} ...{status}" if self.parallel else status, file=self.stream, flush=True)

    def add_success(self, task: Any) -> None:
        seconds = task.values.get("seconds", time.perf_counter() - self._start.get(task.name, time.perf_counter()))
        self.result.executed.append(task.name)
        self.result.seconds[task.name] = seconds
        self._end_line(task, f" {seconds:7.2f} s")

    def add_failure(self, task: Any, fail: Any) -> None:
        self.result.executed.append(task.name)
        known = isinstance(fail, StageFailure)
        self.result.failed[task.name] = fail.message if known else fail.get_msg()
        self._end_line(task, " FAILED")
        if not known:
            print(f"\nerror: {task.name}: internal error\n{fail.get_msg()}", file=self.stream)
        elif self.debug:
            print(f"\nerror: {task.name}: {fail.message}\n{fail.trace}", file=self.stream)
        else:
            print(f"\nerror: {task.name}: {fail.message}\n", file=self.stream)

    def skip_uptodate(self, task: Any) -> None:
        if not task.name.startswith("_"):
            self.result.up_to_date.append(task.name)
            print(f"  {task.name:<32} up to date", file=self.stream)

    def skip_ignore(self, task: Any) -> None:
        pass

    def cleanup_error(self, exception: Any) -> None:
        print(f"error: {exception.get_msg()}", file=self.stream)

    def runtime_error(self, msg: str) -> None:
        print(f"error: {msg}", file=self.stream)

    def teardown_task(self, task: Any) -> None:
        pass

    def complete_run(self) -> None:
        pass


def doit_namespace(
    recipes: Sequence[Recipe], build_root: Path, reporter: type | None = None, dump_after: Sequence[str] = ()
) -> dict[str, Any]:
    """A doit module namespace: DOIT_CONFIG plus one `task_<stage>` creator per stage."""
    version = code_version()
    tasks = [t for r in recipes for t in recipe_tasks(r, build_root, version, dump_after)]
    namespace: dict[str, Any] = {
        "DOIT_CONFIG": {
            "dep_file": str(build_root / ".doit.db"), "backend": "json", "verbosity": 0,
            "default_tasks": [f"verify:{r.name}" for r in recipes],
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
    stream: TextIO | None = None, jobs: int = 1, dump_after: Sequence[str] = (),
) -> BuildResult:
    """Build (export … verify) every recipe given, running only tasks that are out of date.

    `jobs` > 1 runs that many stages at once in worker processes. `dump_after` names lowering
    steps (or `all`) whose form is written to `build/<recipe>/dump/`; an unknown name is a
    UsageError listing the steps.
    """
    from etbuild.stages.lower import LOWERING

    if jobs < 1:
        raise UsageError(f"jobs is {jobs}; expected 1 or more")
    steps = LOWERING.select(dump_after)
    recipes = [load_recipe(p) for p in recipe_paths]
    _check_unique(recipes)
    result = BuildResult()
    attrs = {"result": result, "stream": stream or sys.stdout, "debug": debug, "parallel": jobs > 1}
    reporter = type("Reporter", (StageReporter,), attrs)
    build_root.mkdir(parents=True, exist_ok=True)
    targets = [f"verify:{r.name}" for r in recipes]
    loader = ModuleTaskLoader(doit_namespace(recipes, build_root, reporter, steps))
    result.exit_code = DoitMain(loader).run(["run", *(["-n", str(jobs)] if jobs > 1 else []), *targets])
    return result


def _check_unique(recipes: Sequence[Recipe]) -> None:
    seen: dict[str, Path] = {}
    for r in recipes:
        if r.name in seen:
            raise RecipeError(f"{r.path}: recipe name {r.name!r} is already used by {seen[r.name]}")
        seen[r.name] = r.path
