"""Model kinds: what a recipe's model is, asked by the stages instead of a branch on the model in generic code.

A kind is one entry in `KINDS`, keyed by the factory that makes models of it, as a backend is one entry in
`BACKENDS`; every other factory makes a plain module (`MODULE`), which needs nothing beyond the stages' own
work. A decoder with a KV cache (`DECODER`: a `model.llm` recipe, `etbuild.recipe.llm`) also has checkpoint
files the build reads, constant methods and a tokenizer that emit writes with the program, token sequences to
calibrate on, its own check in verify (tokens, or next-token agreement) and the agreement search that
`verify.fallback: auto` asks of the quantize stage.

A kind names its functions as "module:function", imported on first call: this table, and a no-op build that
reads it, imports no torch and no stage library, and the recipe layer points at none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etbuild.recipe.checks import LLM_FACTORY

if TYPE_CHECKING:
    from etbuild.recipe.config import Recipe


@dataclass(frozen=True)
class Ref:
    """A function by "module:function", imported when first called."""

    path: str

    def load(self) -> Callable[..., Any]:
        module, name = self.path.split(":")
        fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)


@dataclass(frozen=True)
class ModelKind:
    """One kind of model and what the stages ask of it; a None function: the kind has nothing there.

    files: (kwargs) -> the files the model reads besides the recipe (part of the model's cache key).
    constant_methods: (kwargs) -> {method: values}: methods emit adds to the program.
    tokenizer: (kwargs) -> the tokenizer file that travels beside the program, or None.
    calibration: (recipe) -> the calibration calls when the recipe gives no calibration data.
    check: (recipe, pte, run, run_samples, model) -> verify's report of the kind's own check of the program that
        `run` runs (`etbuild.verify.stage.run_samples` runs its calls), against `model`, the recipe's model as
        verify built it (run on copies).
    search: (recipe, exported, plan, converted, calibration) -> the quantize stage's accuracy search on the kind's
        own judge, when `verify.fallback` is "auto".
    """

    name: str
    files: Ref | None = None
    constant_methods: Ref | None = None
    tokenizer: Ref | None = None
    calibration: Ref | None = None
    check: Ref | None = None
    search: Ref | None = None

    def model_files(self, recipe: Recipe) -> list[Path]:
        """The files the model reads besides the recipe and its weights."""
        return list(self.files(recipe.model.factory_kwargs())) if self.files else []

    def emit_args(self, recipe: Recipe) -> tuple[Any, ...]:
        """What emit writes besides the program's methods: (constant methods, tokenizer file), each None when the
        kind has none."""
        if self.constant_methods is None:
            return None, None
        kwargs = recipe.model.factory_kwargs()
        return self.constant_methods(kwargs), self.tokenizer(kwargs) if self.tokenizer else None

    def emit_outputs(self, recipe: Recipe, tokenizer: Path) -> list[Path]:
        """`tokenizer` (where emit writes it) when the model has a tokenizer file, else nothing."""
        return [tokenizer] if self.tokenizer and self.tokenizer(recipe.model.factory_kwargs()) else []

    @property
    def emit_sections(self) -> tuple[str, ...]:
        """The recipe sections emit reads for this kind (the model's, for its constant methods)."""
        return ("model",) if self.constant_methods else ()

    def searches(self, recipe: Recipe) -> bool:
        """Whether the quantize stage runs the kind's accuracy search (`verify.fallback: auto`)."""
        return self.search is not None and recipe.verify.fallback == "auto"


MODULE = ModelKind("module")
"""A plain `nn.Module` from a factory: the stages' generic work is all it needs."""

DECODER = ModelKind(
    "decoder",
    files=Ref("etbuild.llm.runner:checkpoint_files"),
    constant_methods=Ref("etbuild.llm.runner:constant_methods"),
    tokenizer=Ref("etbuild.llm.runner:tokenizer_file"),
    calibration=Ref("etbuild.llm.calibration:calibration_calls"),
    check=Ref("etbuild.verify.llm:llm_check"),
    search=Ref("etbuild.llm.fallback:agreement_search"),
)
"""A decoder-only language model with a KV cache, called as ExecuTorch's LLM runner calls it (`model.llm`)."""

KINDS: dict[str, ModelKind] = {LLM_FACTORY: DECODER}
"""Factory -> the kind of model it makes (any factory not here makes a `MODULE`)."""


def kind_of(recipe: Recipe) -> ModelKind:
    """The kind of the recipe's model."""
    return KINDS.get(recipe.model.factory, MODULE)
