"""Control flow: MoveCall and JumpFalseCall steps and the budgeted loop that runs them.

A jump step returns the index of the next instruction; a move step stores one value's
object as another's. A method whose chain holds a jump runs under an instruction budget
(the chain's length times a factor) and an optional time limit, so a program that loops
forever is stopped with InvalidProgram, naming the loop, instead of hanging. A backward jump
whose condition nothing inside its loop can change fails the first time it is taken: once
such a loop is entered it can never end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from etbuild.errors import InvalidProgram, KernelError, MethodInputError
from etbuild.runtime import checks
from etbuild.runtime.format import program as fb
from etbuild.runtime.values import Values, tensor_nbytes


class Loop(Protocol):
    """What the budgeted loop runs: a loaded method's bound steps and its limits (a `Method`)."""

    name: str
    steps: list[Callable[[], Any]]
    is_jump: list[bool]
    budget: int
    time_limit: float | None

    def failure(self, pc: int, exc: Exception) -> Exception:
        """The error to raise for an exception of the step at pc."""
        ...


def step(values: Values, call: fb.MoveCall | fb.JumpFalseCall, pc: int, instructions: list[fb.Instruction],
         where: str) -> Callable[[], Any]:
    """The step of a MoveCall or JumpFalseCall at instruction pc of a chain."""
    objs, plan = values.objects, values.plan
    if isinstance(call, fb.MoveCall):
        checks.move(plan, call, where)
        src, store = call.move_from, values.setter(call.move_to)
        return lambda: store(objs[src])
    cond, dest, n = call.cond_value_index, call.destination_instruction, len(instructions)
    if not 0 <= dest <= n:
        raise InvalidProgram(f"{where}: jump destination {dest} is outside 0..{n}")
    checks.condition(plan, call, where)
    if dest <= pc and not _can_exit(plan, instructions, dest, pc):
        return _endless_jump(objs, cond, dest, pc, where)

    def jump() -> int:
        return pc + 1 if truth(objs[cond], where) else dest

    return jump


def _endless_jump(objs: list[Any], cond: int, dest: int, pc: int, where: str) -> Callable[[], int]:
    def jump() -> int:
        if truth(objs[cond], where):
            return pc + 1
        raise InvalidProgram(
            f"{where}: the loop at instructions {dest}..{pc} never ends: it jumps back while its "
            f"condition, value {cond}, is false, and nothing in the loop changes that value"
        )

    return jump


def _can_exit(plan: fb.ExecutionPlan, instructions: list[fb.Instruction], dest: int, pc: int) -> bool:
    """Whether the loop from instruction dest to the backward jump at pc may stop looping: something
    in it writes the jump's condition (or memory overlapping it), or jumps out of it. A condition
    that a MoveCall anywhere aliases (or is aliased by) may change through its alias: assumed so."""
    cond = instructions[pc].instr_args.cond_value_index
    moves = [ins.instr_args for ins in instructions if isinstance(ins.instr_args, fb.MoveCall)]
    if any(cond in (m.move_from, m.move_to) for m in moves):
        return True
    span = _span(plan, cond)
    for ins in instructions[dest:pc]:
        a = ins.instr_args
        if isinstance(a, fb.JumpFalseCall):
            if not dest <= a.destination_instruction <= pc:
                return True
            continue
        written = [a.move_to] if isinstance(a, fb.MoveCall) else checks.touched(plan, a)
        if cond in written or (span and any(_overlap(span, _span(plan, i)) for i in written)):
            return True
    return False


def _span(plan: fb.ExecutionPlan, i: int) -> tuple[int, int, int] | None:
    """(memory id, first byte, end byte) of a planned tensor value; None for anything else."""
    t = plan.values[i].val
    if not isinstance(t, fb.Tensor) or t.allocation_info is None:
        return None
    start = t.allocation_info.memory_offset_low | t.allocation_info.memory_offset_high << 32
    return t.allocation_info.memory_id, start, start + tensor_nbytes(t, f"value {i}")[1]


def _overlap(a: tuple[int, int, int], b: tuple[int, int, int] | None) -> bool:
    return b is not None and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def truth(value: Any, where: str) -> bool:
    """A JumpFalse condition: a bool, or a bool tensor that is true when all elements are."""
    if isinstance(value, np.ndarray):
        if value.dtype != np.bool_:
            raise InvalidProgram(f"{where}: jump condition is a {value.dtype} tensor, expected bool")
        return bool(value.all())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InvalidProgram(f"{where}: jump condition is {type(value).__name__}, expected bool")


def run(method: Loop) -> None:
    """Run a method's steps from 0 until pc passes the end, following jumps, within its limits."""
    steps, is_jump, n = method.steps, method.is_jump, len(method.steps)
    pc, left = 0, method.budget
    deadline = time.monotonic() + method.time_limit if method.time_limit is not None else None
    loop = (0, 0)  # the last backward jump taken: (destination, pc)
    try:
        while pc < n:
            left -= 1
            if left < 0:
                raise _stopped(method, loop, f"ran {method.budget} instructions (its budget)")
            if not is_jump[pc]:
                steps[pc]()
                pc += 1
                continue
            nxt = steps[pc]()
            if nxt <= pc:
                loop = (nxt, pc)
                if deadline is not None and time.monotonic() > deadline:
                    raise _stopped(method, loop, f"ran past its {method.time_limit} s time limit")
            pc = nxt
    except (KernelError, InvalidProgram, MethodInputError):  # MethodInputError: a position past a cache
        raise
    except Exception as exc:  # a kernel rejected its arguments: say which instruction
        raise method.failure(pc, exc) from exc


def _stopped(method: Loop, loop: tuple[int, int], what: str) -> InvalidProgram:
    dest, pc = loop
    return InvalidProgram(
        f"method {method.name!r} {what} without finishing, in the loop at instructions {dest}..{pc} "
        f"(the jump at {pc} back to {dest}): a loop that never ends? "
        "(load_method's budget_factor and time_limit allow longer calls)"
    )
