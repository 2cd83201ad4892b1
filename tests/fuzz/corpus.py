"""Corpora for the fuzz tier: valid inputs to mutate, each with the mutators that apply to it.

A `Corpus` is a name, sample files and mutators: our zoo recipes' programs as etbuild builds
them, and (when the executorch oracle is installed) the same models as ExecuTorch builds
them. Adding an input kind, such as XNNPACK delegate blobs, is adding a function here that
returns a Corpus whose mutators edit the blob inside its program.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch._higher_order_ops.scan import scan

from tests.fuzz.blob_mutators import BlobByteMutator, BlobStructureMutator
from tests.fuzz.mutators import ByteMutator, Mutator, StructureMutator

ROOT = Path(__file__).resolve().parents[2]
PROGRAM_MUTATORS: tuple[Mutator, ...] = (ByteMutator(), StructureMutator())
BLOB_MUTATORS: tuple[Mutator, ...] = (BlobByteMutator(), BlobStructureMutator())


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
    from etbuild.build.driver import build

    recipes = zoo_recipes()
    with redirect_stdout(io.StringIO()):
        result = build(recipes, build_root)
    if result.exit_code:
        raise RuntimeError(f"building the zoo failed: {result.failed}")
    return Corpus("ours", tuple(build_root / r.stem / f"{r.stem}.pte" for r in recipes))


def cached(path: Path, make: Callable[[], bytes]) -> Path | None:
    """`path`, made by `make` (written atomically) unless an earlier session left it; None when
    `make` fails (ExecuTorch's own limits), with the reason kept beside it as `<path>.failed`."""
    failed = path.with_name(path.name + ".failed")
    if not path.exists() and not failed.exists():
        from etbuild.fsutil import write_bytes

        try:
            with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                write_bytes(path, make())
        except Exception as exc:  # noqa: BLE001  (not ours to fix: recorded, and the sample left out)
            write_bytes(failed, f"{type(exc).__name__}: {exc}\n".encode())
    return path if path.exists() else None


def cache_dir(kind: str) -> Path:
    """build/fuzz/<kind>/<key>: the key changes with the recipes and the executorch oracle's version."""
    from importlib.metadata import version

    digest = hashlib.sha256(version("executorch").encode())
    for path in zoo_recipes():
        digest.update(path.name.encode() + path.read_bytes())
    return ROOT / "build" / "fuzz" / kind / digest.hexdigest()[:12]


def _edge_program(module: torch.nn.Module | Path) -> bytes:
    """A recipe's model (by its path) or a module, through ExecuTorch's export → to_edge → to_executorch."""
    from executorch.exir import to_edge

    from etbuild.recipe import load_recipe
    from etbuild.verify.oracle import export_methods

    if isinstance(module, Path):
        exported = export_methods(load_recipe(module))
    else:
        exported = torch.export.export(module, (torch.randn(5, 3),))
    return to_edge(exported).to_executorch().buffer


def executorch_built() -> Corpus:
    """The zoo recipes' models built by ExecuTorch's own export → to_edge → to_executorch, and a
    scan, which ExecuTorch lowers to a loop (a backward jump: no zoo recipe has one).
    Cached under build/fuzz/executorch/."""
    out = cache_dir("executorch")
    made = [cached(out / f"{p.stem}.pte", partial(_edge_program, p)) for p in zoo_recipes()]
    made.append(cached(out / "scan.pte", partial(_edge_program, RunningSum())))
    return Corpus("executorch", tuple(p for p in made if p is not None))


def xnnpack_built() -> Corpus:
    """The zoo recipes' models lowered by ExecuTorch to XNNPACK delegates: float, and static and
    dynamic int8 where tests/backends/xnnpack lowers them (the quantized node kinds and quant
    params), one recipe per distinct model. Cached under build/fuzz/xnnpack/; mutated outside
    and inside the delegate blobs."""
    from etbuild.recipe import load_recipe
    from tests.backends.xnnpack.oracle import lower_recipe
    from tests.backends.xnnpack.test_recipes import CASES

    out = cache_dir("xnnpack")
    made = [cached(out / f"{path.stem}.{quant or 'float'}.pte", lambda p=path, q=quant: lower_recipe(load_recipe(p), q))
            for path, quant in CASES]
    return Corpus("xnnpack", tuple(p for p in made if p is not None), PROGRAM_MUTATORS + BLOB_MUTATORS)


LLM_RECIPES = {
    "llm-custom-xnnpack": {"llm": {"attention": "custom"}, "backends": [{"name": "xnnpack"}]},
    "llm-8da4w-xnnpack": {"llm": {"attention": "custom"}, "backends": [{"name": "xnnpack"}],
                          "quantize": {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"},
                          "verify": {"agreement": 0.0}},
}
"""Our own runner-contract programs of the tests' tiny Llama: custom attention (llama:: ops, the KV cache as state)
delegated to XNNPACK, float and 8da4w with 4-bit embeddings (a random tiny model's agreement is no gate here)."""


def llm_ours(root: Path) -> tuple[Path, ...]:
    """`LLM_RECIPES` built by etbuild under `root` (a seeded tiny checkpoint; etbuild's build state keeps them
    up to date)."""
    from etbuild.build.driver import build
    from tests.llm_support import TINY, save_checkpoint, write_llm_recipe

    root.mkdir(parents=True, exist_ok=True)
    if not (root / "ckpt" / "config.json").exists():
        save_checkpoint(root / "ckpt", TINY)
    llm = {"path": "ckpt", "max_context": 64, "max_prefill": 1}
    recipes = [write_llm_recipe(root, name, llm, **sections) for name, sections in LLM_RECIPES.items()]
    with redirect_stdout(io.StringIO()):
        result = build(recipes, root / "build")
    if result.exit_code:
        raise RuntimeError(f"building the LLM recipes failed: {result.failed}")
    return tuple(root / "build" / name / f"{name}.pte" for name in LLM_RECIPES)


def llm_built() -> Corpus:
    """Language-model programs: ExecuTorch's export_llm programs of the tests' tiny Llama (KV cache, custom SDPA,
    XNNPACK; fp32 and 8da4w: the llama:: kernels, dynamic token counts, mutable state), cached as
    tests/export_llm_support.py builds them, and ours of the same shape (`llm_ours`); mutated outside and inside
    the delegate blobs."""
    from tests.export_llm_support import tiny_program

    samples = (tiny_program("fp32"), tiny_program("8da4w"), *llm_ours(ROOT / "build" / "fuzz" / "llm-ours"))
    return Corpus("llm", samples, PROGRAM_MUTATORS + BLOB_MUTATORS)
