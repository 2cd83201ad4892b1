"""The ETDump container (identifier ED00), both ways, without torch.

Python types that mirror `schema/etdump.fbs` field for field (etbuild.runtime.format.mirror), and `read_etdump` /
`write_etdump`. ExecuTorch's runtime writes the flatbuffer size-prefixed (a u32 byte count
first, the identifier at bytes 8-11); the reader also takes one without the prefix. A
truncated or foreign file raises `InvalidETDump` naming the file and what is wrong.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from etbuild.devtools.schemas import devtools_schema
from etbuild.errors import InvalidETDump, InvalidProgram
from etbuild.runtime.format.mirror import mirror
from etbuild.runtime.format.program import Bool, Double, Int, Null, String  # the same tables as program.fbs's
from etbuild.runtime.format.reader import Layout, decode, schema_layout
from etbuild.runtime.format.writer import FlatBufferWriter

SCHEMA_FILE = "etdump.fbs"  # in etbuild.schema
IDENTIFIER = b"ED00"
VERSION = 0  # what ExecuTorch 1.5.1's runtime writes
NO_CHAIN = 0xFFFFFFFFFFFFFFFF  # DebugEvent.chain_index of the method's outputs


class ValueType:
    NULL, INT, BOOL, FLOAT, DOUBLE, TENSOR, TENSOR_LIST, STRING = range(8)


@dataclass(slots=True)
class Tensor:
    scalar_type: int = 0
    sizes: list[int] = field(default_factory=list)
    strides: list[int] = field(default_factory=list)
    offset: int = 0


@dataclass(slots=True)
class Float:
    float_val: float = 0.0


@dataclass(slots=True)
class TensorList:
    tensors: list[Tensor] = field(default_factory=list)


@dataclass(slots=True)
class Value:
    val: int = 0  # a ValueType: which of the fields below holds the value
    tensor: Tensor | None = None
    tensor_list: TensorList | None = None
    int_value: Int | None = None
    float_value: Float | None = None
    double_value: Double | None = None
    bool_value: Bool | None = None
    output: Bool | None = None


@dataclass(slots=True)
class DebugEvent:
    chain_index: int = 0
    instruction_id: int = -1
    debug_entry: Value | None = None
    delegate_debug_id_int: int = -1
    delegate_debug_id_str: str | None = None
    name: str | None = None


@dataclass(slots=True)
class AllocationEvent:
    allocator_id: int = 0
    allocation_size: int = 0


@dataclass(slots=True)
class ProfileEvent:
    name: str | None = None
    chain_index: int = 0
    instruction_id: int = -1
    delegate_debug_id_int: int = -1
    delegate_debug_id_str: str | None = None
    delegate_debug_metadata: bytes = b""
    start_time: int = 0
    end_time: int = 0


@dataclass(slots=True)
class Event:
    profile_event: ProfileEvent | None = None
    allocation_event: AllocationEvent | None = None
    debug_event: DebugEvent | None = None


@dataclass(slots=True)
class Allocator:
    name: str | None = None


@dataclass(slots=True)
class RunData:
    name: str | None = None
    bundled_input_index: int = -1
    allocators: list[Allocator] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass(slots=True)
class ETDump:
    version: int = 0
    run_data: list[RunData] = field(default_factory=list)


TYPES: dict[str, type] = mirror(
    Null, Tensor, Int, Bool, Float, Double, String, TensorList, Value, DebugEvent, AllocationEvent, ProfileEvent,
    Event, Allocator, RunData, ETDump,
)


@cache
def etdump_layout() -> Layout:
    """The reader's layout of etdump.fbs, decoding into the types above."""
    return schema_layout(SCHEMA_FILE, TYPES)


def read_etdump(data: Any, source: str = "<bytes>") -> ETDump:
    """Decode an ETDump, size-prefixed or not; InvalidETDump (naming `source`) when it is not a well-formed one."""
    buf = memoryview(data).cast("B")
    if len(buf) >= 12 and bytes(buf[8:12]) == IDENTIFIER:
        size = struct.unpack_from("<I", buf, 0)[0]
        if size != len(buf) - 4:
            raise InvalidETDump(f"{source}: the size prefix says {size} bytes follow; {len(buf) - 4} do "
                                "(a truncated or padded file)")
        buf = buf[4:]
    elif len(buf) < 8 or bytes(buf[4:8]) != IDENTIFIER:
        found = f"{bytes(buf[4:8])!r} and {bytes(buf[8:12])!r}"
        raise InvalidETDump(f"{source}: not an ETDump: bytes 4-7 and 8-11 are {found}; expected {IDENTIFIER!r} "
                            "at 8-11 (size-prefixed, as ExecuTorch writes it) or at 4-7")
    try:
        dump = decode(buf, etdump_layout())
    except InvalidProgram as exc:
        raise InvalidETDump(f"{source}: malformed ETDump: {exc}") from None
    for r, run in enumerate(dump.run_data):
        for e, event in enumerate(run.events):
            if sum(x is not None for x in (event.profile_event, event.allocation_event, event.debug_event)) != 1:
                raise InvalidETDump(f"{source}: run {r} event {e} holds no event or more than one")
    return dump


def write_etdump(dump: ETDump) -> bytes:
    """The ETDump as ExecuTorch's runtime writes it: size-prefixed, identifier ED00."""
    writer = FlatBufferWriter(devtools_schema(SCHEMA_FILE))
    root = writer.table(dump, "ETDump")
    writer.b.FinishSizePrefixed(root, file_identifier=IDENTIFIER)
    return bytes(writer.b.Output())
