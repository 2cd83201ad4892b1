"""Accumulates one ExecutionPlan's values, operators and instructions, and a constant pool."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import CONSTANT_ALIGNMENT, round_up


class ConstantPool:
    """Constant tensor bytes, stored once per distinct blob, packed into one segment.

    Index 0 is the reserved placeholder; each blob but the last is zero-padded to
    CONSTANT_ALIGNMENT, as ExecuTorch lays out its constant segment.
    """

    def __init__(self) -> None:
        self.blobs: list[bytes] = []
        self.index: dict[bytes, int] = {}

    def add(self, data: bytes) -> int:
        """The data_buffer_idx for these bytes (1-based)."""
        key = hashlib.sha256(data).digest() + len(data).to_bytes(8, "little")
        if key not in self.index:
            self.blobs.append(data)
            self.index[key] = len(self.blobs)
        return self.index[key]

    def segment(self) -> tuple[bytes, list[int]]:
        """The segment bytes and offsets (offsets[0] is the placeholder 0)."""
        offsets, chunks, pos = [0], [], 0
        for i, blob in enumerate(self.blobs):
            offsets.append(pos)
            chunks.append(blob)
            pos += len(blob)
            if i + 1 < len(self.blobs):
                pad = round_up(pos, CONSTANT_ALIGNMENT) - pos
                chunks.append(bytes(pad))
                pos += pad
        return b"".join(chunks), offsets


class DelegateData:
    """Delegate blobs and the named data their weights live in, for the whole program.

    Each blob becomes a segment after the others (constants, mutable state); the references
    to it are fixed when the segments are laid out (`place`). Named data is stored once per
    key, each entry its own segment, in the order the delegates first name it.
    """

    def __init__(self) -> None:
        self.blobs: list[bytes] = []
        self.refs: list[fb.BackendDelegateDataReference] = []
        self.named: dict[str, bytes] = {}

    def add(self, blob: bytes, named_data: dict[str, bytes] | Any) -> fb.BackendDelegateDataReference:
        """The reference to a new blob's segment; its named data joins the program's."""
        for key, data in named_data.items():
            self.named.setdefault(key, bytes(data))
        ref = fb.BackendDelegateDataReference(location=fb.DataLocation.SEGMENT, index=len(self.blobs))
        self.blobs.append(blob)
        self.refs.append(ref)
        return ref

    def place(self, program: fb.Program, first_segment: int) -> list[bytes]:
        """Point the references and the program's named data at segments from `first_segment` on;
        returns those segments' bytes (blobs, then named data)."""
        for ref in self.refs:
            ref.index += first_segment
        base = first_segment + len(self.blobs)
        program.named_data = [fb.NamedData(key, base + k) for k, key in enumerate(self.named)]
        return [*self.blobs, *self.named.values()]


class PlanBuilder:
    """Builds one method's ExecutionPlan value by value."""

    def __init__(self, name: str, pool: ConstantPool) -> None:
        self.name = name
        self.pool = pool
        self.values: list[fb.EValue] = []
        self.operators: list[fb.Operator] = []
        self._op_index: dict[tuple[str, str], int] = {}
        self.instructions: list[fb.Instruction] = []
        self.frames: list[fb.FrameList] = []
        self.delegates: list[fb.BackendDelegate] = []
        self._literals: dict[tuple[str, str], int] = {}

    def add(self, val: fb.KernelTypes) -> int:
        self.values.append(fb.EValue(val))
        return len(self.values) - 1

    def tensor(
        self, scalar_type: int, sizes: Sequence[int], *, data: bytes | None = None,
        dim_order: Sequence[int] | None = None, dynamic: bool = False,
    ) -> int:
        """A tensor value; with data it is a constant stored in the pool."""
        order = bytes(dim_order if dim_order is not None else range(len(sizes)))
        idx = self.pool.add(data) if data is not None else 0
        dynamism = fb.TensorShapeDynamism.DYNAMIC_BOUND if dynamic else fb.TensorShapeDynamism.STATIC
        return self.add(fb.Tensor(
            scalar_type=scalar_type, sizes=[int(s) for s in sizes], dim_order=order,
            data_buffer_idx=idx, shape_dynamism=dynamism,
        ))

    def literal(self, val: fb.KernelTypes) -> int:
        """A value the program only reads, stored once per method however many calls read it.

        Only for arguments known at build time: a value a call writes (a prim op's result)
        comes from `add`, one per call.
        """
        key = (type(val).__name__, repr(val))
        if key not in self._literals:
            self._literals[key] = self.add(val)
        return self._literals[key]

    def int_value(self, v: int) -> int:
        return self.literal(fb.Int(int(v)))

    def double_value(self, v: float) -> int:
        return self.literal(fb.Double(float(v)))

    def bool_value(self, v: bool) -> int:
        return self.literal(fb.Bool(bool(v)))

    def null_value(self) -> int:
        return self.literal(fb.Null())

    def string_value(self, v: str) -> int:
        return self.literal(fb.String(v))

    def int_list(self, item_values: Sequence[int]) -> int:
        """An IntList whose items are the given Int value indices."""
        return self.literal(fb.IntList(list(item_values)))

    def double_list(self, items: Sequence[float]) -> int:
        return self.literal(fb.DoubleList([float(x) for x in items]))

    def bool_list(self, items: Sequence[bool]) -> int:
        return self.literal(fb.BoolList([bool(x) for x in items]))

    def tensor_list(self, items: Sequence[int]) -> int:
        return self.add(fb.TensorList(list(items)))

    def optional_tensor_list(self, items: Sequence[int]) -> int:
        return self.add(fb.OptionalTensorList(list(items)))

    def operator(self, name: str, overload: str) -> int:
        key = (name, overload)
        if key not in self._op_index:
            self._op_index[key] = len(self.operators)
            self.operators.append(fb.Operator(name, overload))
        return self._op_index[key]

    def kernel_call(self, name: str, overload: str, args: Sequence[int], frame: fb.Frame | None) -> None:
        call = fb.KernelCall(self.operator(name, overload), list(args))
        self.instructions.append(fb.Instruction(call))
        self.frames.append(fb.FrameList([frame] if frame else []))

    def delegate_call(self, delegate: fb.BackendDelegate, args: Sequence[int], frame: fb.Frame | None) -> None:
        """A DelegateCall of a new delegate of the plan; args are its inputs, then its outputs."""
        self.delegates.append(delegate)
        call = fb.DelegateCall(len(self.delegates) - 1, list(args))
        self.instructions.append(fb.Instruction(call))
        self.frames.append(fb.FrameList([frame] if frame else []))

    def move(self, src: int, dst: int) -> None:
        self.instructions.append(fb.Instruction(fb.MoveCall(src, dst)))
        self.frames.append(fb.FrameList([]))

    def jump_false(self, cond: int) -> int:
        """Append a JumpFalseCall with its destination still open; returns its index."""
        self.instructions.append(fb.Instruction(fb.JumpFalseCall(cond, -1)))
        self.frames.append(fb.FrameList([]))
        return len(self.instructions) - 1

    def patch_jump(self, index: int) -> None:
        """Point the jump at `index` to the next instruction to be appended."""
        self.instructions[index].instr_args.destination_instruction = len(self.instructions)

    def build(self, inputs: Sequence[int], outputs: Sequence[int]) -> fb.ExecutionPlan:
        chain = fb.Chain(instructions=self.instructions, stacktrace=self.frames)
        return fb.ExecutionPlan(
            name=self.name, values=self.values, inputs=list(inputs), outputs=list(outputs),
            chains=[chain], operators=self.operators, delegates=self.delegates, non_const_buffer_sizes=[0],
        )
