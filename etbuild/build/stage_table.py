"""The stage table: each stage of one recipe as a call, with what it reads, writes and is keyed on.

`stage_calls` gives, for each stage, the function, its arguments, the files it reads (outputs
of earlier stages, and source files the recipe names), the files and directories it writes,
and the recipe sections it reads. A new stage is one entry there and one name in `STAGES`.
A section name `section.field` keys on that one field.

A recipe with a `quantize:` section has a quantize stage between export and lower, keyed on
that section (with the calibration file's bytes), `model`, `backends` (`observer: auto` judges
candidate calibrations by their lowered programs), and the `verify.samples` and `verify.seed` its
per-layer report is measured on (with `verify.fallback: auto`, also that and `verify.agreement`, the
language-model search's target): changing the calibration data re-runs
quantize and what follows, never export. Lower then reads `quantized/<method>.pt2` instead of
`export/<method>.pt2`. A recipe without one has no quantize stage.

Lowering dumps (`dump_after`) are extra outputs of the lower call, not part of its key.

Every stage runs torch on one thread (`StageCall.run`), here, in a `-n` worker or on a Dask
worker: a stage's files are a function of its keyed inputs only, which a shared cache relies
on, and torch's float reductions round differently with more threads (the converted model of
`transformer-int8-dynamic-xnnpack` moves by 55.9 dB SNR between one and two threads, which
moved its verify verdict between `etbuild build` and `etbuild build -n 2`).
Nothing here knows doit: `etbuild.build.tasks` makes these calls into tasks.

Nothing here imports torch or a stage module either: a call names its function (`StageFn`), which
is imported when the call runs, so a build whose stages are all up to date (a no-op build)
never pays torch's import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etbuild.build import collector
from etbuild.build.layout import Artifacts
from etbuild.recipe import Recipe
from etbuild.recipe.kinds import kind_of

STAGES = ("export", "quantize", "lower", "plan", "emit", "select", "verify")


@dataclass(frozen=True)
class StageFn:
    """A stage function by name (`etbuild.stages.plan`, `run_plan`), imported when first called."""

    module: str
    name: str

    def load(self) -> Callable[..., None]:
        """The function (importing its module, and torch with it, on first use, uncollected)."""
        with collector.paused():
            fn: Callable[..., None] = getattr(importlib.import_module(self.module), self.name)
        return fn

    def __call__(self, *args: Any) -> Any:
        """Call the function (imported on first use): a stage may take another function by name this way."""
        return self.load()(*args)


STAGE_FNS = {
    "export": StageFn("etbuild.stages.export", "run_export"),
    "quantize": StageFn("etbuild.stages.quantize", "run_quantize"),
    "lower": StageFn("etbuild.stages.lower", "run_lower"),
    "plan": StageFn("etbuild.stages.plan", "run_plan"),
    "emit": StageFn("etbuild.stages.emit", "run_emit"),
    "select": StageFn("etbuild.stages.select", "run_select"),
    "verify": StageFn("etbuild.verify.stage", "run_verify"),
}
"""Stage name -> its function, by module and name."""
COMPILE_PROGRAM = StageFn("etbuild.pipeline", "program_bytes")
"""What quantize's `observer: auto` compiles candidates with: passed in, as the pipeline sits above quantize."""


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
    fn: StageFn
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
        """Run the stage with torch on one thread, wherever it runs (see the module docstring), with
        older objects out of the garbage collector's passes (`etbuild.build.collector`)."""
        import torch

        fn = self.fn.load()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with collector.stage_scope(str(self.root), self.stage):
                fn(*self.args)
        finally:
            torch.set_num_threads(threads)


def model_files(recipe: Recipe) -> list[Path]:
    """Files the model stage reads besides the recipe: weights, a language model's folder (config,
    safetensors, tokenizer) and a path-based factory."""
    files = [recipe.model.weights] if recipe.model.weights else []
    files += kind_of(recipe).model_files(recipe)
    source = recipe.model.factory.rsplit(":", 1)[0]
    if source.endswith(".py"):
        files.append(Path(source))  # file factories are absolute once loaded
    return files


def allowlist_files(recipe: Recipe) -> list[Path]:
    """Allowlist files the select stage reads (`allow: file.txt` or `@file.txt` entries)."""
    return list(recipe.operators.files)


def calibration_files(recipe: Recipe) -> list[Path]:
    """The calibration data file and text files of `quantize`, if the recipe names them."""
    cfg = recipe.quantize.calibration if recipe.quantize else None
    return [*([cfg.data] if cfg.data else []), *cfg.text_files()] if cfg else []


SECTION_FILES: dict[str, Callable[[Recipe], list[Path]]] = {
    "model": model_files, "operators": allowlist_files, "quantize": calibration_files,
}
"""Recipe section -> the files it names: a stage reading the section reads them too."""


def emit_sections(recipe: Recipe) -> tuple[str, ...]:
    """What emit reads: `emit`, and what the model kind asks (a language model's `model`: its constant methods and
    tokenizer)."""
    return (*kind_of(recipe).emit_sections, "emit")


def emit_args(recipe: Recipe, a: Artifacts) -> tuple[Any, ...]:
    """Emit's arguments after lowered, plan and pte: the model kind's constant methods and tokenizer (None, None
    for a plain module), the constants' keys and `emit.weights` (None: the weights stay in the `.pte`)."""
    return (*kind_of(recipe).emit_args(recipe), a.constant_names, recipe.emit.weights)


def quantize_sections(recipe: Recipe) -> tuple[str, ...]:
    """What quantize reads: when the model kind's search runs (`verify.fallback: auto`), also that and
    `verify.agreement` (the search's target) when the recipe sets it."""
    search: tuple[str, ...] = ()
    if kind_of(recipe).searches(recipe):
        search = ("verify.fallback", *(("verify.agreement",) if recipe.verify.agreement is not None else ()))
    return ("model", "quantize", "backends", "verify.samples", "verify.seed", *search)


def stage_calls(recipe: Recipe, a: Artifacts, dump_after: Sequence[str] = ()) -> dict[str, StageCall]:
    """Every stage of one recipe, in STAGES order (quantize only when the recipe has the
    section); `dump_after` names lowering steps to dump."""
    exports = tuple(a.exports.values())
    methods = a.quantized if recipe.quantize else a.exports
    q_args = (methods, a.layers, a.quantize_report) if recipe.quantize else ()
    q_reads = (a.layers,) if recipe.quantize else ()
    dumps = _dump_files(a, dump_after)

    def call(stage: str, args: tuple[Any, ...], reads: Sequence[Path],
             outputs: Sequence[Path], sections: tuple[str, ...], extra: tuple[Path, ...] = ()) -> StageCall:
        return StageCall(stage, recipe, a.root, STAGE_FNS[stage], args, tuple(reads), tuple(outputs), sections, extra)

    calls = [
        call("export", (recipe, a.exports), (), exports, ("model",)),
        call("quantize", (recipe, a.exports, a.quantized, a.layers, COMPILE_PROGRAM), exports,
             [*a.quantized.values(), a.layers], quantize_sections(recipe)),
        call("lower", (methods, a.lowered, a.debug_map, a.dump_dir, dump_after, recipe.backends, a.constant_names),
             tuple(methods.values()), [a.lowered, a.debug_map, a.constant_names, a.etrecord, *a.method_etrecords,
                                       *a.partition(recipe)], ("backends",), dumps),
        call("plan", (a.lowered, recipe.memory, a.root), [a.lowered], a.memory, ("memory",)),
        call("emit", (a.lowered, a.plan, a.pte, *emit_args(recipe, a)), [a.lowered, a.plan, a.constant_names],
              [a.pte, *a.data_files(recipe), *kind_of(recipe).emit_outputs(recipe, a.tokenizer)],
             emit_sections(recipe)),
        call("select", (recipe, a.pte, a.lowered, a.root), [a.pte, a.lowered],
             [*a.select, a.runtime_package], ("operators",)),
        call("verify", (recipe, a.pte, a.runtime_zip, a.verify, methods, a.debug_map, *q_args),
             [a.pte, *a.data_files(recipe), a.runtime_zip, *methods.values(), a.debug_map, *q_reads],
             [a.verify, *q_args[2:], *([a.bpte] if recipe.verify.bundle else [])],
             ("model", "quantize", "verify")),
    ]
    return {c.stage: c for c in calls if c.stage != "quantize" or recipe.quantize}


def _dump_files(a: Artifacts, dump_after: Sequence[str]) -> tuple[Path, ...]:
    """The lowering dumps asked for (importing the lowering pipeline, and torch, only when some are)."""
    if not dump_after:
        return ()
    from etbuild.stages import lower

    return tuple(lower.dump_files(a.dump_dir, dump_after).values())
