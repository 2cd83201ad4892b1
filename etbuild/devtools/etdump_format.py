"""The ETDump container (identifier ED00), both ways, without torch.

Python types made from `schema/etdump.fbs` (etbuild.devtools.schemas), and `read_etdump` /
`write_etdump`. ExecuTorch's runtime writes the flatbuffer size-prefixed (a u32 byte count
first, the identifier at bytes 8-11); the reader also takes one without the prefix. A
truncated or foreign file raises `InvalidETDump` naming the file and what is wrong.
"""

from __future__ import annotations

import struct
from typing import Any

from etbuild.devtools.schemas import devtools_layout, devtools_schema, mirror_types
from etbuild.errors import InvalidETDump, InvalidProgram
from etbuild.runtime.format.reader import decode
from etbuild.runtime.format.writer import FlatBufferWriter

SCHEMA_FILE = "etdump.fbs"  # in etbuild.schema
IDENTIFIER = b"ED00"
VERSION = 0  # what ExecuTorch 1.5.1's runtime writes
NO_CHAIN = 0xFFFFFFFFFFFFFFFF  # DebugEvent.chain_index of the method's outputs


class ValueType:
    NULL, INT, BOOL, FLOAT, DOUBLE, TENSOR, TENSOR_LIST, STRING = range(8)


TYPES = mirror_types(SCHEMA_FILE)
Tensor, Value, DebugEvent, ProfileEvent = (TYPES[n] for n in ("Tensor", "Value", "DebugEvent", "ProfileEvent"))
Event, RunData, ETDump, Bool = (TYPES[n] for n in ("Event", "RunData", "ETDump", "Bool"))


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
        dump = decode(buf, devtools_layout(SCHEMA_FILE))
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
