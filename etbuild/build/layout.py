"""Where a recipe's build puts its files: `build/<recipe>/…`, one property per artifact.

Stages, the build machinery and the tools all read paths from here, so the layout is one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from etbuild.devtools.etrecord_format import etrecord_path, inspector_methods, method_etrecord_path
from etbuild.lowering.partition_report import PARTITION_FILES
from etbuild.recipe import Recipe


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
    def etrecord(self) -> Path:
        """The ETRecord for ExecuTorch's Inspector (etbuild.devtools.etrecord), written by lower."""
        return etrecord_path(self.root)

    @property
    def method_etrecords(self) -> list[Path]:
        """One ETRecord per method, for ExecuTorch's Inspector, unless the only method is `forward`."""
        return [method_etrecord_path(self.root, m) for m in inspector_methods(self.methods)]

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
    def constant_names(self) -> Path:
        """The key of each constant of the lowered program (etbuild.lowering.constant_names), for emit."""
        return self.root / "lowered.constants.json"

    def data_files(self, recipe: Recipe) -> list[Path]:
        """The `.ptd` emit writes beside the `.pte` when the recipe keeps its weights apart (`emit.weights`)."""
        weights = recipe.emit.weights
        return [self.root / f"{weights.file}.ptd"] if weights else []

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

    @property
    def tokenizer(self) -> Path:
        """A language model's tokenizer.json, copied beside the `.pte` by emit (when its folder has one)."""
        return self.root / "tokenizer.json"

    @property
    def bpte(self) -> Path:
        """The bundled program `verify: {bundle: true}` writes beside the `.pte`."""
        return self.root / f"{self.name}.bpte"
