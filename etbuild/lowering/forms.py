"""What flows between lowering steps: a program as graphs, then in the program format.

A dialect names what a form may contain at a point of the pipeline; each step says which
one it takes and which it gives, and a pipeline whose steps do not chain is refused.
The graphs inside a `GraphMethod` (etbuild.graphs.method, which the backends' AOT halves read
too) are torch.fx graphs, which steps may edit in place as torch.fx passes do; the dataclasses
only fix which graph and which constants go together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch.export import ExportedProgram

from etbuild.graphs.method import GraphMethod
from etbuild.lowering.partition_report import PartitionReport
from etbuild.recipe.config import BackendConfig
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import write_program


@dataclass(frozen=True)
class Dialect:
    """What a form may contain between two steps; `suffix` is its dump file's extension."""

    name: str
    doc: str
    suffix: str


ATEN = Dialect("aten", "torch.export's ATen graphs: any ATen operator, views, higher-order ops", ".py")
CORE_ATEN = Dialect(
    "core-aten", "core ATen graphs after decomposition, with the values known at build time", ".py"
)
DELEGATED = Dialect(
    "delegated", "core ATen graphs in which each partition a backend takes is one call of its delegate", ".py"
)
UNPLANNED = Dialect(
    "unplanned-program",
    "the program format: out-variant KernelCalls, constants in a segment, tensors not yet placed in memory",
    ".txt",
)


@dataclass(frozen=True)
class GraphProgram:
    """Every method of a program as graphs, sorted by name (as ExecuTorch stores them).

    backends: the recipe's backends in priority order (what the partition step delegates to);
    report: what the partition step did (None before it, or without backends)."""

    methods: tuple[GraphMethod, ...]
    backends: tuple[BackendConfig, ...] = ()
    report: PartitionReport | None = None

    @classmethod
    def of(cls, methods: Mapping[str, ExportedProgram], backends: Sequence[BackendConfig] = ()) -> GraphProgram:
        return cls(tuple(GraphMethod(name, methods[name]) for name in sorted(methods)), tuple(backends))


@dataclass(frozen=True)
class LoweredProgram:
    """An unplanned program, its segment payloads (constants, mutable state, delegate blobs,
    named data), its debug map (method -> value index -> ValueSource; not part of the program),
    what the partition step reported, and the key of each constant (etbuild.lowering.constant_names)."""

    program: fb.Program
    segments: tuple[bytes, ...]
    debug: Mapping[str, Mapping[int, Any]] = field(default_factory=dict)
    report: PartitionReport | None = None
    names: Mapping[str, Mapping[int, str]] = field(default_factory=dict)  # method -> constant value -> key

    def to_bytes(self) -> bytes:
        """The program file: ExecuTorch's format, without a memory plan."""
        return write_program(self.program, list(self.segments))
