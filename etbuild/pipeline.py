"""The default pipeline in memory, top to bottom: export → lower → plan → emit.

The doit stages run the same steps with files between them; this form is for code that
has an nn.Module in hand (tests, benchmarks, notebooks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram

from etbuild.lowering.debug_map import ValueSource
from etbuild.lowering.partition_report import PartitionReport
from etbuild.recipe import BackendConfig, MemoryConfig
from etbuild.runtime.format.pte import write_program
from etbuild.stages.emit import emit
from etbuild.stages.lower import lower
from etbuild.stages.plan import MethodPlan, plan_program

DEFAULT_MEMORY = MemoryConfig()


@dataclass(frozen=True)
class Compiled:
    """A compiled program: its `.pte` bytes, the memory plan of each method, the debug map
    (method -> value index -> the graph node it holds; see etbuild.lowering.debug_map) and, with
    backends, what the partition step delegated."""

    pte: bytes
    plans: list[MethodPlan]
    debug: Mapping[str, Mapping[int, ValueSource]]
    report: PartitionReport | None = None


def compile_exported(methods: Mapping[str, ExportedProgram], memory: MemoryConfig = DEFAULT_MEMORY,
                     backends: Sequence[BackendConfig] = ()) -> Compiled:
    """Compile exported methods (name → ExportedProgram) into one `.pte`, delegating to `backends`."""
    lowered = lower(methods, backends=backends)
    plans = [m.plan for m in plan_program(lowered.program, memory)[0]]
    return Compiled(write_program(emit(lowered.program, plans), list(lowered.segments)), plans, lowered.debug,
                    lowered.report)


def compile_module(
    module: torch.nn.Module, inputs: tuple[Any, ...], memory: MemoryConfig = DEFAULT_MEMORY,
    dynamic_shapes: Any = None, backends: Sequence[BackendConfig] = (),
) -> Compiled:
    """Compile `module(*inputs)` into `.pte` bytes with one method, `forward`."""
    exported = torch.export.export(module.eval(), inputs, dynamic_shapes=dynamic_shapes, strict=False)
    return compile_exported({"forward": exported}, memory, backends)
