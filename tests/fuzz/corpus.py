"""Corpora for the fuzz tier: valid inputs to mutate, each with the mutators that apply to it.

A `Corpus` is a name, sample files and mutators: our zoo recipes' programs as etbuild builds
them, and (when the executorch oracle is installed) the same models as ExecuTorch builds
them. Adding an input kind, such as XNNPACK delegate blobs, is adding a function here that
returns a Corpus whose mutators edit the blob inside its program.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import torch
from torch._higher_order_ops.scan import scan

from tests.fuzz.mutators import ByteMutator, Mutator, StructureMutator

ROOT = Path(__file__).resolve().parents[2]
PROGRAM_MUTATORS: tuple[Mutator, ...] = (ByteMutator(), StructureMutator())


class RunningSum(torch.nn.Module):
    """The running sum of a sequence (and its doubles) by torch's scan."""

    def forward(self, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def step(total: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            total = total + x
            return total, total * 2

        return scan(step, torch.zeros(xs.shape[1:]), xs)


@dataclass(frozen=True)
class Corpus:
    """Sample files and the mutators that make malformed variants of them."""

    name: str
    samples: tuple[Path, ...]
    mutators: tuple[Mutator, ...] = PROGRAM_MUTATORS


def zoo_recipes() -> list[Path]:
    from etbuild.recipe import discover_recipes

    return discover_recipes(ROOT / "recipes")


def ours(build_root: Path) -> Corpus:
    """Every zoo recipe built by etbuild (the final `.pte` of each)."""
    from etbuild.build import build

    recipes = zoo_recipes()
    with redirect_stdout(io.StringIO()):
        result = build(recipes, build_root)
    if result.exit_code:
        raise RuntimeError(f"building the zoo failed: {result.failed}")
    return Corpus("ours", tuple(build_root / r.stem / f"{r.stem}.pte" for r in recipes))


def executorch_built(out_dir: Path) -> Corpus:
    """The zoo recipes' models built by ExecuTorch's own export → to_edge → to_executorch, and a
    scan, which ExecuTorch lowers to a loop (a backward jump: no zoo recipe has one)."""
    from etbuild.oracle import executorch_build
    from etbuild.recipe import load_recipe
    from tests.conftest import executorch_pte

    out_dir.mkdir(parents=True, exist_ok=True)
    samples = []
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        for path in zoo_recipes():
            recipe = load_recipe(path)
            samples.append(executorch_build(recipe, out_dir / f"{recipe.name}.pte").path)
        samples.append(executorch_pte(RunningSum(), (torch.randn(5, 3),), out_dir / "scan.pte"))
    return Corpus("executorch", tuple(samples))


