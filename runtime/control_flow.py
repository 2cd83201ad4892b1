"""Control flow: MoveCall and JumpFalseCall steps and the budgeted loop that runs them.

A jump step returns the index of the next instruction; a move step stores one value's
object as another's. A method whose chain holds a jump runs under an instruction budget,
so a program that loops forever is stopped with InvalidProgram instead of hanging.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from etbuild.errors import InvalidProgram, KernelError
from etbuild.runtime.format import program as fb

if TYPE_CHECKING:
    from etbuild.runtime.binding import Values
    from etbuild.runtime.program import Method


def step(values: Values, call: fb.MoveCall | fb.JumpFalseCall, pc: int, n: int, where: str) -> Callable[[], Any]:
    """The step of a MoveCall or JumpFalseCall at instruction pc of n."""
    objs = values.objects
    if isinstance(call, fb.MoveCall):
        src, store = call.move_from, values.setter(call.move_to)
        return lambda: store(objs[src])
    cond, dest = call.cond_value_index, call.destination_instruction
    if not 0 <= dest <= n:
        raise InvalidProgram(f"{where}: jump destination {dest} is outside 0..{n}")

    def jump() -> int:
        return pc + 1 if truth(objs[cond], where) else dest

    return jump


def truth(value: Any, where: str) -> bool:
    """A JumpFalse condition: a bool, or a bool tensor that is true when all elements are."""
    if isinstance(value, np.ndarray):
        if value.dtype != np.bool_:
            raise InvalidProgram(f"{where}: jump condition is a {value.dtype} tensor, expected bool")
        return bool(value.all())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InvalidProgram(f"{where}: jump condition is {type(value).__name__}, expected bool")


def run(method: Method) -> None:
    """Run a method's steps from 0 until pc passes the end, following jumps, within its budget."""
    steps, is_jump, n = method.steps, method.is_jump, len(method.steps)
    pc, left = 0, method.budget
    try:
        while pc < n:
            left -= 1
            if left < 0:
                raise InvalidProgram(
                    f"method {method.name!r} ran {method.budget} instructions without finishing "
                    "(instruction budget exhausted: a loop that never ends?)"
                )
            if is_jump[pc]:
                pc = steps[pc]()
            else:
                steps[pc]()
                pc += 1
    except (KernelError, InvalidProgram):
        raise
    except Exception as exc:  # a kernel rejected its arguments: say which instruction
        raise method.failure(pc, exc) from exc
