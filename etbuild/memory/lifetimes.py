"""Lifetimes of the tensors a program must place in planned memory.

A tensor is planned when it is neither a constant nor caller-supplied: activations, user
inputs and outputs. Its lifetime is the closed interval of instruction indices from its
first to its last mention (as an argument, a result, or an item of a list value); user
inputs are live from before instruction 0, outputs until after the last instruction.
Mutable state (a buffer the model updates) is live for the whole method and across calls,
so no other tensor ever shares its bytes. A MoveCall makes its target an alias of its
source, so the source lives as long as the target is used.
"""

from __future__ import annotations

from dataclasses import dataclass

from etbuild.runtime.data_files import is_external
from etbuild.runtime.format import program as fb
from etbuild.runtime.values import tensor_nbytes


@dataclass(frozen=True)
class TensorLife:
    """One planned tensor: its value index, size in bytes and [start, end] instructions."""

    value: int
    nbytes: int
    start: int
    end: int

    def overlaps(self, other: TensorLife) -> bool:
        return self.start <= other.end and other.start <= self.end


def _mentions(plan: fb.ExecutionPlan, args: list[int]) -> list[int]:
    out = []
    for i in args:
        out.append(i)
        v = plan.values[i].val
        if isinstance(v, (fb.TensorList, fb.OptionalTensorList)):
            out.extend(j for j in v.items if j >= 0)
    return out


def _instruction_values(ins: fb.Instruction) -> list[int]:
    a = ins.instr_args
    if isinstance(a, (fb.KernelCall, fb.DelegateCall)):
        return list(a.args)
    if isinstance(a, fb.MoveCall):
        return [a.move_from, a.move_to]
    if isinstance(a, fb.JumpFalseCall):
        return [a.cond_value_index]
    return []


def is_mutable_state(t: fb.Tensor) -> bool:
    """A buffer the model mutates: a planned tensor with an initial value, or one named by its fully
    qualified name without one (its initial state is zeros, which the arena holds)."""
    info = t.extra_tensor_info
    if is_external(t):  # in a data file: state when planned (its initial value copied in), else a constant
        return t.allocation_info is not None
    if t.data_buffer_idx > 0:
        return t.allocation_info is not None or info is not None
    return info is not None and bool(info.fully_qualified_name) and info.location == 0  # 0: in the program


def needs_planning(t: fb.Tensor) -> bool:
    """True for tensors that live in planned memory (not constants)."""
    return (t.data_buffer_idx == 0 and not is_external(t)) or is_mutable_state(t)


def lifetimes(plan: fb.ExecutionPlan) -> list[TensorLife]:
    """Every planned tensor of the plan with its lifetime, in value order."""
    instructions = plan.chains[0].instructions if plan.chains else []
    last = len(instructions)
    span: dict[int, list[int]] = {}
    for i in plan.inputs:
        span[i] = [-1, -1]
    for pc, ins in enumerate(instructions):
        for i in _mentions(plan, _instruction_values(ins)):
            s = span.setdefault(i, [pc, pc])
            s[1] = pc
    for i in plan.outputs:
        span.setdefault(i, [last, last])[1] = last
    for ins in reversed(instructions):
        move = ins.instr_args
        if isinstance(move, fb.MoveCall) and move.move_to in span and move.move_from in span:
            span[move.move_from][1] = max(span[move.move_from][1], span[move.move_to][1])
    for i, ev in enumerate(plan.values):
        if isinstance(ev.val, fb.Tensor) and is_mutable_state(ev.val):
            span[i] = [-1, last]
    lives = []
    for i, (start, end) in sorted(span.items()):
        v = plan.values[i].val
        if isinstance(v, fb.Tensor) and needs_planning(v):
            lives.append(TensorLife(i, tensor_nbytes(v, f"value {i}")[1], start, end))
    return lives


def peak_live_bytes(lives: list[TensorLife], alignment: int) -> int:
    """The lower bound of any plan: the largest total of (aligned) bytes live at once."""
    events: dict[int, int] = {}
    for t in lives:
        size = -(-t.nbytes // alignment) * alignment
        events[t.start] = events.get(t.start, 0) + size
        events[t.end + 1] = events.get(t.end + 1, 0) - size
    peak = live = 0
    for pc in sorted(events):
        live += events[pc]
        peak = max(peak, live)
    return peak
