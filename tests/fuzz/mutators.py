"""Mutators: each turns a valid `.pte` (or blob) into a malformed one, deterministically from an rng.

A mutator is anything with a `name` and `mutate(data, rng) -> bytes` (the `Mutator` protocol);
corpora (tests/fuzz/corpus.py) say which mutators apply to their samples, so a new kind of
input, such as a delegate blob, is one more corpus with its own mutator.

- `ByteMutator` overwrites a few bytes of the flatbuffer with boundary and random values.
- `StructureMutator` decodes the program, changes one field that the format lets a runtime
  check (sizes, scalar types, dim orders, list items, value and operator indices, jump
  targets, memory offsets, segment offsets, scalar arguments…), and encodes it again.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import assemble, read_program


class Mutator(Protocol):
    name: str

    def mutate(self, data: bytes, rng: random.Random) -> bytes: ...


BYTE_VALUES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)
# Interesting integers for a field, clipped to its range by `_pick`.
INTS = (0, 1, -1, 2, 3, 7, 16, 255, 256, 1023, 4096, 65535, 1 << 20, 1 << 31, (1 << 31) - 1, -(1 << 31), 1 << 32,
        1 << 40, 1 << 62, -(1 << 62))
INT32 = (-(1 << 31), (1 << 31) - 1)
UINT32 = (0, (1 << 32) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
UINT8 = (0, 255)


def _pick(rng: random.Random, bounds: tuple[int, int], near: int | None = None) -> int:
    """An interesting integer within bounds: a boundary, a power of two, or next to `near`."""
    choices = [v for v in INTS if bounds[0] <= v <= bounds[1]] + list(bounds)
    if near is not None:
        choices += [v for v in (near - 1, near + 1, near * 2, -near) if bounds[0] <= v <= bounds[1]]
    return rng.choice(choices)


@dataclass(frozen=True)
class ByteMutator:
    """Overwrites 1–`max_edits` bytes inside the flatbuffer (the segments hold only data)."""

    name: str = "bytes"
    max_edits: int = 6

    def mutate(self, data: bytes, rng: random.Random) -> bytes:
        out = bytearray(data)
        end = _flatbuffer_end(data)
        for _ in range(rng.randint(1, self.max_edits)):
            pos = rng.randrange(end)
            out[pos] = rng.choice(BYTE_VALUES) if rng.random() < 0.5 else rng.randrange(256)
        return bytes(out)


def _flatbuffer_end(data: bytes) -> int:
    """Where the flatbuffer ends: the extended header's program_size, else the file's end."""
    if data[8:12] == b"eh00":
        program_size = struct.unpack_from("<Q", data, 16)[0]
        return min(program_size, len(data))
    return len(data)


Edit = Callable[[fb.Program, random.Random], str | None]


@dataclass(frozen=True)
class StructureMutator:
    """Decodes, applies one field edit (chosen at random among `EDITS`), encodes."""

    name: str = "structure"

    def mutate(self, data: bytes, rng: random.Random) -> bytes:
        def edit(program: fb.Program) -> None:
            for _ in range(8):  # an edit may not apply (no lists, no jumps): try another
                if EDITS[rng.choice(sorted(EDITS))](program, rng) is not None:
                    return

        return edited(data, edit)


def edited(data: bytes, edit: Callable[[fb.Program], Any]) -> bytes:
    """A `.pte` decoded, changed in place by `edit`, and encoded again with the same segment bytes
    (the segment table is written as the Program says, so an edit may make it lie)."""
    program, header = read_program(data)
    payload = b""
    if header is not None:
        payload = data[header.segment_base_offset : header.segment_base_offset + header.segment_data_size]
    writable(program)
    edit(program)
    return assemble(program, payload)


def writable(program: fb.Program) -> None:
    """The reader's memoryviews in a Program, as bytes the encoder can write."""
    for plan in program.execution_plan:
        for ev in plan.values:
            if isinstance(ev.val, fb.Tensor):
                ev.val.dim_order = bytes(ev.val.dim_order)
        for d in plan.delegates:
            for spec in d.compile_specs:
                spec.value = bytes(spec.value)


# ----------------------------------------------------------------------------- field edits
# Each edit changes one field of a random plan and returns what it did, or None when the
# program has nothing it applies to.


def _plan(program: fb.Program, rng: random.Random) -> fb.ExecutionPlan:
    return rng.choice(program.execution_plan)


def _values_of(plan: fb.ExecutionPlan, kind: type | tuple[type, ...]) -> list[Any]:
    return [ev.val for ev in plan.values if isinstance(ev.val, kind)]


def _instructions_of(plan: fb.ExecutionPlan, kind: type) -> list[Any]:
    return [ins.instr_args for chain in plan.chains for ins in chain.instructions if isinstance(ins.instr_args, kind)]


def _choose(rng: random.Random, items: list[Any]) -> Any | None:
    return rng.choice(items) if items else None


def edit_tensor_sizes(program: fb.Program, rng: random.Random) -> str | None:
    t = _choose(rng, [t for t in _values_of(_plan(program, rng), fb.Tensor) if t.sizes])
    if t is None:
        return None
    k = rng.randrange(len(t.sizes))
    t.sizes = list(t.sizes)
    t.sizes[k] = _pick(rng, INT32, t.sizes[k])
    if rng.random() < 0.2:
        t.sizes.append(rng.choice([0, 1, 2]))  # rank no longer matches dim_order
    return f"sizes[{k}]"


def edit_scalar_type(program: fb.Program, rng: random.Random) -> str | None:
    t = _choose(rng, _values_of(_plan(program, rng), fb.Tensor))
    if t is None:
        return None
    t.scalar_type = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 11, 12, 15, 22, 27, 29, 30, 100, -1])
    return "scalar_type"


def edit_dim_order(program: fb.Program, rng: random.Random) -> str | None:
    t = _choose(rng, [t for t in _values_of(_plan(program, rng), fb.Tensor) if t.sizes])
    if t is None:
        return None
    order = list(t.dim_order)
    choice = rng.randrange(3)
    if choice == 0 and len(order) > 1:
        rng.shuffle(order)  # a valid permutation: a different layout
    elif choice == 1 and order:
        order[rng.randrange(len(order))] = _pick(rng, UINT8)
    else:
        order = order[:-1] if order and rng.random() < 0.5 else [*order, len(order)]
    t.dim_order = bytes(order)
    return "dim_order"


def edit_tensor_memory(program: fb.Program, rng: random.Random) -> str | None:
    t = _choose(rng, _values_of(_plan(program, rng), fb.Tensor))
    if t is None:
        return None
    choice = rng.randrange(5)
    if choice == 0:
        t.data_buffer_idx = _pick(rng, UINT32, t.data_buffer_idx)
    elif choice == 1 or t.allocation_info is None:
        t.allocation_info = None if t.allocation_info is not None else fb.AllocationDetails(1, 0, 0)
    elif choice == 2:
        t.allocation_info.memory_id = _pick(rng, UINT32, t.allocation_info.memory_id)
    elif choice == 3:
        t.allocation_info.memory_offset_low = _pick(rng, UINT32, t.allocation_info.memory_offset_low)
    else:
        t.allocation_info.memory_offset_high = _pick(rng, UINT32)
    return "tensor memory"


def edit_tensor_flags(program: fb.Program, rng: random.Random) -> str | None:
    t = _choose(rng, _values_of(_plan(program, rng), fb.Tensor))
    if t is None:
        return None
    if rng.random() < 0.5:
        t.shape_dynamism = rng.choice([0, 1, 2, 3, 127])
    else:
        t.storage_offset = _pick(rng, INT32)
    return "tensor flags"


def edit_scalar_value(program: fb.Program, rng: random.Random) -> str | None:
    v = _choose(rng, _values_of(_plan(program, rng), (fb.Int, fb.Double, fb.Bool)))
    if v is None:
        return None
    if isinstance(v, fb.Int):
        v.int_val = _pick(rng, INT64, v.int_val)
    elif isinstance(v, fb.Double):
        v.double_val = rng.choice([0.0, -0.0, -1.0, 1e-30, 1e30, float("inf"), float("-inf"), float("nan")])
    else:
        v.bool_val = not v.bool_val
    return "scalar value"


def edit_list_items(program: fb.Program, rng: random.Random) -> str | None:
    plan = _plan(program, rng)
    lst = _choose(rng, _values_of(plan, (fb.IntList, fb.TensorList, fb.OptionalTensorList, fb.DoubleList,
                                         fb.BoolList)))
    if lst is None:
        return None
    items = list(lst.items)
    choice = rng.randrange(3)
    if choice == 0 and items:
        items.pop(rng.randrange(len(items)))
    elif choice == 1 or not items:
        items.append(rng.randrange(len(plan.values)) if isinstance(lst, (fb.IntList, fb.TensorList)) else 0)
    else:
        k = rng.randrange(len(items))
        if isinstance(lst, (fb.DoubleList, fb.BoolList)):
            items[k] = type(items[k])(not items[k]) if isinstance(items[k], bool) else -items[k] - 1.0
        else:
            items[k] = rng.choice([rng.randrange(len(plan.values)), -1, len(plan.values), _pick(rng, INT32)])
    lst.items = items
    return "list items"


def edit_value_type(program: fb.Program, rng: random.Random) -> str | None:
    """One value becomes a value of another type (a list where a tensor is due, a Null…)."""
    plan = _plan(program, rng)
    if not plan.values:
        return None
    ev = rng.choice(plan.values)
    ev.val = rng.choice([fb.Null(), fb.Int(rng.choice([0, 1, -1, 3])), fb.Double(0.5), fb.Bool(True),
                         fb.String("x"), fb.IntList([0]), fb.DoubleList([1.0]), fb.BoolList([True]),
                         fb.TensorList([]), fb.OptionalTensorList([-1])])
    return "value type"


def edit_kernel_call(program: fb.Program, rng: random.Random) -> str | None:
    plan = _plan(program, rng)
    call = _choose(rng, _instructions_of(plan, fb.KernelCall))
    if call is None:
        return None
    choice = rng.randrange(4)
    args = list(call.args)
    if choice == 0:
        call.op_index = rng.choice([rng.randrange(max(len(plan.operators), 1)), -1, len(plan.operators)])
    elif choice == 1 and args:
        args[rng.randrange(len(args))] = rng.choice([rng.randrange(len(plan.values)), -1, len(plan.values)])
    elif choice == 2 and args:
        args.pop(rng.randrange(len(args)))
    else:
        args.insert(rng.randrange(len(args) + 1), rng.randrange(len(plan.values)))
    call.args = args
    return "kernel call"


def edit_operator(program: fb.Program, rng: random.Random) -> str | None:
    """An operator becomes another operator of the plan (same call sites, other schema)."""
    plan = _plan(program, rng)
    if len(plan.operators) < 2:
        return None
    a, b = rng.sample(range(len(plan.operators)), 2)
    plan.operators[a] = fb.Operator(plan.operators[b].name, plan.operators[b].overload)
    return "operator"


def edit_control_flow(program: fb.Program, rng: random.Random) -> str | None:
    plan = _plan(program, rng)
    n = sum(len(c.instructions) for c in plan.chains)
    jump = _choose(rng, _instructions_of(plan, fb.JumpFalseCall))
    move = _choose(rng, _instructions_of(plan, fb.MoveCall))
    if jump is not None and (move is None or rng.random() < 0.7):
        if rng.random() < 0.7:
            jump.destination_instruction = rng.choice([0, rng.randrange(n + 1), n, n + 1, -1])
        else:
            jump.cond_value_index = rng.randrange(len(plan.values))
        return "jump"
    if move is not None:
        move.move_from = rng.randrange(len(plan.values))
        return "move"
    return None


def edit_plan_lists(program: fb.Program, rng: random.Random) -> str | None:
    """Inputs, outputs and planned buffer sizes."""
    plan = _plan(program, rng)
    choice = rng.randrange(3)
    if choice == 0 and plan.inputs:
        plan.inputs = [*plan.inputs[:-1], rng.choice([rng.randrange(len(plan.values)), -1, len(plan.values)])]
    elif choice == 1 and plan.outputs:
        plan.outputs = [*plan.outputs[:-1], rng.choice([rng.randrange(len(plan.values)), len(plan.values)])]
    elif plan.non_const_buffer_sizes:
        sizes = list(plan.non_const_buffer_sizes)
        k = rng.randrange(len(sizes))
        sizes[k] = _pick(rng, INT64, sizes[k])
        plan.non_const_buffer_sizes = sizes
    else:
        return None
    return "plan lists"


def edit_segments(program: fb.Program, rng: random.Random) -> str | None:
    choice = rng.randrange(3)
    if choice == 0 and program.segments:
        seg = rng.choice(program.segments)
        seg.offset = rng.choice([0, 1, 128, seg.offset + 128, 1 << 20])
    elif choice == 1 and program.segments:
        seg = rng.choice(program.segments)
        seg.size = _pick(rng, (0, 1 << 62), seg.size)
    elif program.constant_segment is not None and program.constant_segment.offsets:
        offsets = list(program.constant_segment.offsets)
        k = rng.randrange(len(offsets))
        offsets[k] = _pick(rng, (0, 1 << 62), offsets[k])
        program.constant_segment.offsets = offsets
    else:
        return None
    return "segments"


EDITS: dict[str, Edit] = {
    "tensor sizes": edit_tensor_sizes,
    "scalar type": edit_scalar_type,
    "dim order": edit_dim_order,
    "tensor memory": edit_tensor_memory,
    "tensor flags": edit_tensor_flags,
    "scalar value": edit_scalar_value,
    "list items": edit_list_items,
    "value type": edit_value_type,
    "kernel call": edit_kernel_call,
    "operator": edit_operator,
    "control flow": edit_control_flow,
    "plan lists": edit_plan_lists,
    "segments": edit_segments,
}
