"""State several methods of one program share: planned once in its own memory id, one arena per Program."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn

from etbuild.errors import StageError
from etbuild.memory.shared import SHARED_LEVEL, shared_state
from etbuild.pipeline import compile_exported
from etbuild.recipe import MemoryConfig
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program
from etbuild.runtime.state import state_memory_ids
from etbuild.stages.export import MethodModule
from etbuild.stages.plan import levels_of


class Counter(nn.Module):
    """`add` mutates the running total; `read` only reads it."""

    total: torch.Tensor

    def __init__(self, start: float = 7.0) -> None:
        super().__init__()
        self.register_buffer("total", torch.full((3,), start))

    def add(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x)
        return self.total.clone()

    def read(self, x: torch.Tensor) -> torch.Tensor:
        return self.total * 2 + x


@functools.cache
def counter_pte(start: float = 7.0) -> bytes:
    model, x = Counter(start), (torch.zeros(3),)
    methods = {name: torch.export.export(MethodModule(model, name), x, strict=False) for name in ("add", "read")}
    return compile_exported(methods).pte


def test_a_method_sees_the_state_another_wrote():
    program = Program.from_bytes(counter_pte())
    add, read = program.load_method("add"), program.load_method("read")
    one, zero = np.ones(3, np.float32), np.zeros(3, np.float32)
    assert add(one)[0].tolist() == [8.0] * 3
    assert read(zero)[0].tolist() == [16.0] * 3
    assert add(one)[0].tolist() == [9.0] * 3
    assert read(one)[0].tolist() == [19.0] * 3


def test_a_zero_initial_state_is_not_stored_and_starts_at_zero():
    """As ExecuTorch's default export leaves a KV cache: the zero-filled arena is the initial state."""
    program, _ = read_program(counter_pte(0.0))
    assert not program.mutable_data_segments
    assert all(ev.val.data_buffer_idx == 0 for plan in program.execution_plan for ev in plan.values
               if getattr(ev.val, "extra_tensor_info", None) is not None)
    assert len(counter_pte(0.0)) < len(counter_pte()) - 12  # 12 bytes of state and their offsets
    loaded = Program.from_bytes(counter_pte(0.0))
    add, read = loaded.load_method("add"), loaded.load_method("read")
    assert read(np.zeros(3, np.float32))[0].tolist() == [0.0] * 3
    assert add(np.ones(3, np.float32))[0].tolist() == [1.0] * 3
    assert read(np.ones(3, np.float32))[0].tolist() == [3.0] * 3


def test_loading_a_method_sets_the_state_it_names_to_its_initial_value():
    """As in ExecuTorch's runtime: load every method before the first call."""
    program = Program.from_bytes(counter_pte())
    add = program.load_method("add")
    add(np.ones(3, np.float32))
    read = program.load_method("read")
    assert read(np.zeros(3, np.float32))[0].tolist() == [14.0] * 3


def test_each_program_has_its_own_state():
    first, second = Program.from_bytes(counter_pte()), Program.from_bytes(counter_pte())
    add, read = first.load_method("add"), second.load_method("read")
    add(np.ones(3, np.float32))
    assert read(np.zeros(3, np.float32))[0].tolist() == [14.0] * 3


def test_the_state_has_one_place_in_every_method():
    program, _ = read_program(counter_pte())
    places = set()
    for plan in program.execution_plan:
        named = [ev.val for ev in plan.values if getattr(ev.val, "extra_tensor_info", None) is not None]
        assert [t.extra_tensor_info.fully_qualified_name for t in named] == ["model.total"]
        info = named[0].allocation_info
        places.add((info.memory_id, info.memory_offset_low))
        assert len(plan.non_const_buffer_sizes) == 3
    assert places == {(2, 0)}
    assert state_memory_ids(program) == {2: 16}


def test_a_caller_buffer_holds_the_state():
    program = Program.from_bytes(counter_pte())
    state = np.zeros(16, np.uint8)
    add = program.load_method("add", buffers=[None, state])
    add(np.ones(3, np.float32))
    assert state.view(np.float32)[:3].tolist() == [8.0] * 3


def test_a_buffer_needs_one_shape_in_every_method():
    program, _ = read_program(counter_pte())
    read = next(p for p in program.execution_plan if p.name == "read")
    total = next(ev.val for ev in read.values if getattr(ev.val, "extra_tensor_info", None) is not None)
    total.sizes = [4]
    with pytest.raises(StageError, match=r"buffer model.total is \[3\] .* in method add but \[4\] .* in method read"):
        shared_state(program.execution_plan, levels_of(MemoryConfig()), 16)


def test_the_shared_level_name_is_reserved():
    program, _ = read_program(counter_pte())
    levels = levels_of(MemoryConfig())
    levels[0] = type(levels[0])(SHARED_LEVEL, None, 16)
    with pytest.raises(StageError, match="reserved"):
        shared_state(program.execution_plan, levels, 16)
