"""The default pipeline in memory, top to bottom: export → lower → plan → emit.

The doit stages run the same steps with files between them; this form is for code that
has an nn.Module in hand (tests, benchmarks, notebooks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from etbuild.runtime.format.pte import write_program
from etbuild.stages.emit import emit
from etbuild.stages.lower import lower
from etbuild.stages.plan import MethodPlan, plan_method


@dataclass(frozen=True)
class PlanOptions:
    """The memory options a pipeline run plans with (the recipe's `memory` section)."""

    planner: str = "greedy"
    alignment: int = 16


@dataclass(frozen=True)
class Compiled:
    """A compiled program: its `.pte` bytes and the memory plan of each method."""

    pte: bytes
    plans: list[MethodPlan]


def compile_module(module: torch.nn.Module, inputs: tuple[Any, ...], memory: PlanOptions = PlanOptions()) -> Compiled:
    """Compile `module(*inputs)` into `.pte` bytes."""
    exported = torch.export.export(module.eval(), inputs, strict=False)
    program, segments = lower(exported)
    plans = [plan_method(p, memory) for p in program.execution_plan]
    return Compiled(write_program(emit(program, plans), segments), plans)
