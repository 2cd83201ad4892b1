"""Constant folding of factory calls: deterministic, static and read by something folded."""

from __future__ import annotations

import numpy as np
import torch

from etbuild.pipeline import compile_module
from etbuild.runtime import Program
from etbuild.stages.lower import lower


def _operators(module: torch.nn.Module, *inputs: torch.Tensor, dynamic_shapes: object = None) -> list[str]:
    ep = torch.export.export(module.eval(), inputs, dynamic_shapes=dynamic_shapes)
    plan = lower({"forward": ep}).program.execution_plan[0]
    return [plan.operators[i.instr_args.op_index].name for c in plan.chains for i in c.instructions]


class Positions(torch.nn.Module):
    """Whisper's and GPT-2's position embedding: the table gathered by arange(T), added to the input."""

    def __init__(self, positions: int = 16, width: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(positions, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table(torch.arange(x.shape[1], device=x.device))


def test_position_ids_from_arange_fold_into_the_rows_they_gather():
    x = torch.randn(1, 12, 8)
    assert _operators(Positions(), x) == ["aten::add"]
    compiled = compile_module(Positions(), (x,))
    assert len(compiled.pte) < 16 * 8 * 4 + 4096  # the 12 gathered rows replace the 16-row table
    (got,) = Program.from_bytes(compiled.pte).load_method()(x.numpy())
    np.testing.assert_allclose(got, Positions()(x).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_a_symbolic_length_keeps_arange_and_the_gather():
    x = torch.randn(1, 12, 8)
    steps = torch.export.Dim("steps", min=2, max=16)
    ops = _operators(Positions(), x, dynamic_shapes={"x": {1: steps}})
    assert "aten::arange" in ops and "aten::embedding" in ops


class OnesPlus(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.ones(64, 64)


class ArangeSum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.arange(256, dtype=torch.float32).sum()


class EmptyPlus(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.empty(4).fill_(2.0)


def test_a_factory_read_at_run_time_stays_a_call():
    """Folding must not grow the program: storing a full 64x64 frees nothing."""
    assert "aten::full" in _operators(OnesPlus(), torch.randn(64, 64))


def test_a_factory_reduced_at_build_time_folds_to_its_small_result():
    ops = _operators(ArangeSum(), torch.randn(4))
    assert ops == ["aten::mul"]


def test_empty_is_never_folded():
    """`empty` holds whatever the memory held: not a value known at build time."""
    assert "aten::empty" in " ".join(_operators(EmptyPlus(), torch.randn(4)))
