"""Constant instructions run once at load: quantized weights kept dequantized (memory for speed).

A quantized program stores its weights as int8 and dequantizes them on every call (so does
ExecuTorch's portable runtime), sometimes followed by a layout copy of the result. With
`preload=True`, the default of `Program.load_method`, the runtime runs such instructions once,
at load, each into an array of its own outside the planned arenas, and the calls skip them.

An instruction is preloaded when its operator is one of `PRELOADABLE` (pure: dequantizing
and layout copies), every tensor it reads is a constant or the result of a preloaded
instruction, and its result is a static tensor that no other instruction writes and the
method does not return (nor holds in a list). The price is the bytes of those results, which `memory.json`
reports per method as `preloaded_bytes` (the arena still reserves their planned places,
which a program run without preloading needs). `preload=False` keeps every allocation
within the plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.errors import InvalidProgram, KernelError
from etbuild.runtime.format import program as fb
from etbuild.runtime.kernel_registry import canonical_name
from etbuild.runtime.values import LIST_TYPES, is_constant, list_items, tensor_nbytes

PRELOADABLE = frozenset({
    "quantized_decomposed::dequantize_per_tensor.out",
    "quantized_decomposed::dequantize_per_tensor.Tensor_out",
    "quantized_decomposed::dequantize_per_channel.out",
    "aten::permute_copy.out",
    "aten::view_copy.out",
    "aten::t_copy.out",
    "aten::transpose_copy.int_out",
    "dim_order_ops::_to_dim_order_copy.out",
})


def _written(plan: fb.ExecutionPlan, instructions: list[fb.Instruction]) -> Counter[int]:
    """How many instructions write each value (the result of a call, the target of a move)."""
    counts: Counter[int] = Counter()
    for ins in instructions:
        call = ins.instr_args
        if isinstance(call, fb.KernelCall) and call.args:
            counts[call.args[-1]] += 1
        elif isinstance(call, fb.MoveCall):
            counts[call.move_to] += 1
    return counts


def preloadable(plan: fb.ExecutionPlan, instructions: list[fb.Instruction]) -> list[int]:
    """The indices of the instructions a load runs once, in order."""
    values = plan.values
    known = {i for i, ev in enumerate(values) if is_constant(ev.val)}
    written = _written(plan, instructions)
    kept: set[int] | None = None  # the values a call must not own: outputs and list items (found when needed)
    found = []
    for pc, ins in enumerate(instructions):
        call = ins.instr_args
        if not isinstance(call, fb.KernelCall) or not call.args or not 0 <= call.op_index < len(plan.operators):
            continue
        op = plan.operators[call.op_index]
        ret = call.args[-1]
        if canonical_name(op.name or "", op.overload or "") not in PRELOADABLE or not 0 <= ret < len(values):
            continue
        result = values[ret].val
        reads = [i for i in call.args[:-1] if i != ret and 0 <= i < len(values)
                 and isinstance(values[i].val, fb.Tensor)]
        static = isinstance(result, fb.Tensor) and result.shape_dynamism == fb.TensorShapeDynamism.STATIC
        if not (static and written[ret] == 1 and all(i in known for i in reads)):
            continue
        if kept is None:
            kept = set(plan.outputs) | {j for i, ev in enumerate(values) if isinstance(ev.val, LIST_TYPES)
                                        for j in list_items(plan, i)}
        if ret not in kept:
            known.add(ret)
            found.append(pc)
    return found


def preloaded_bytes(plan: fb.ExecutionPlan) -> int:
    """The bytes a load with preloading allocates beyond the plan, for one method."""
    instructions = plan.chains[0].instructions if plan.chains else []
    total = 0
    for pc in preloadable(plan, instructions):
        result = plan.values[instructions[pc].instr_args.args[-1]].val
        total += tensor_nbytes(result, f"instruction {pc}")[1]
    return total


def preload(
    plan: fb.ExecutionPlan, instructions: list[fb.Instruction], objects: list[Any],
    step: Callable[[fb.KernelCall, str], Callable[[], Any]],
) -> list[int]:
    """Run the preloadable instructions (of a checked chain), each into a fresh array; the indices run.
    A kernel that fails raises KernelError naming the instruction, as it would on a call."""
    done = preloadable(plan, instructions)
    for pc in done:
        call = instructions[pc].instr_args
        ret = call.args[-1]
        current = objects[ret]
        objects[ret] = np.empty(current.shape, current.dtype)
        where = f"instruction {pc}"
        try:
            step(call, where)()
        except (KernelError, InvalidProgram):
            raise
        except Exception as exc:  # a kernel rejected its (constant) arguments
            raise KernelError(f"{where}, run once at load: {type(exc).__name__}: {exc}") from exc
    return done

