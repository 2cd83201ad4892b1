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
from etbuild.lowering.external_weights import separate
from etbuild.lowering.partition_report import PartitionReport
from etbuild.recipe import BackendConfig, MemoryConfig, WeightsConfig
from etbuild.runtime.format.ptd import write_ptd
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
    ptd: bytes | None = None  # the weights, when kept apart (`weights`)


def compile_exported(methods: Mapping[str, ExportedProgram], memory: MemoryConfig = DEFAULT_MEMORY,
                     backends: Sequence[BackendConfig] = (), weights: WeightsConfig | None = None) -> Compiled:
    """Compile exported methods (name → ExportedProgram) into one `.pte`, delegating to `backends`; with
    `weights`, the weights it selects go to `.ptd` bytes instead (etbuild.lowering.external_weights)."""
    lowered = lower(methods, backends=backends)
    plans = [m.plan for m in plan_program(lowered.program, memory)[0]]
    program, segments, ptd = emit(lowered.program, plans), list(lowered.segments), None
    if weights is not None:
        separated = separate(program, segments, lowered.names, weights.only)
        program, segments, ptd = separated.program, separated.segments, write_ptd(separated.entries)
    return Compiled(write_program(program, segments), plans, lowered.debug, lowered.report, ptd)


def program_bytes(methods: Mapping[str, ExportedProgram], backends: Sequence[BackendConfig]) -> bytes:
    """The `.pte` bytes of exported methods delegating to `backends`: how `observer: auto` compiles a candidate
    (the build passes it to the quantize stage, which sits below the pipeline)."""
    return compile_exported(methods, backends=backends).pte


def compile_module(
    module: torch.nn.Module, inputs: tuple[Any, ...], memory: MemoryConfig = DEFAULT_MEMORY,
    dynamic_shapes: Any = None, backends: Sequence[BackendConfig] = (), weights: WeightsConfig | None = None,
) -> Compiled:
    """Compile `module(*inputs)` into `.pte` bytes with one method, `forward` (its weights apart with `weights`)."""
    exported = torch.export.export(module.eval(), inputs, dynamic_shapes=dynamic_shapes, strict=False)
    return compile_exported({"forward": exported}, memory, backends, weights)
