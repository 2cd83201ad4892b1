"""The `vela_bin_stream` blob ExecuTorch's EthosUBackend reads (ARM-ETHOSU.md §6), byte for byte. Torch-free.

A sequence of blocks, each a 32-byte header (name[16] NUL-padded, size u32 LE of the unpadded data,
external u8, 11 reserved zero bytes) and its data zero-padded to a multiple of 16, in a fixed order:
`vela_bin_stream` (empty), `cmd_data` (Vela's command stream, "COP1"/"COP2"), `weight_data`,
`scratch_size` (u32), `inputs` and `outputs` (i32 count, then per tensor 9 i32: shape[6], elem_size,
offset, region), `vela_end_stream` (empty, ending exactly at the blob's end). An external block holds
64 hex characters, the key of its data in the named data (sha256 of tag, NUL, payload). `parse` makes
the checks `vela_bin_validate`/`vela_bin_read` make, and raises InvalidProgram where they fail.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from etbuild.errors import InvalidProgram

HEADER, ALIGN, NAME = 32, 16, 16
BEGIN, END = "vela_bin_stream", "vela_end_stream"
ORDER = (BEGIN, "cmd_data", "weight_data", "scratch_size", "inputs", "outputs", END)
COMMAND_MAGICS = (b"COP1", b"COP2")
KEY_CHARS = 64
TOSA_KEY_PREFIX = "ethos_u.tosa."


def tosa_key(blob: bytes | memoryview) -> str:
    """The named-data key of a delegate's TOSA graph (etbuild's, beside the blob for runtimes without an
    NPU): derived from the blob, so no compile spec names it."""
    return TOSA_KEY_PREFIX + hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class IoTensor:
    """One delegate input or output as the NPU reads it: shape left-padded to 6 dims with 1s, bytes per
    element, byte offset into its region (1: the scratch arena)."""

    shape: tuple[int, ...]
    elem_size: int
    offset: int
    region: int = 1

    @property
    def elements(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count


@dataclass(frozen=True)
class VelaBin:
    """A parsed (or to-be-packed) blob; `external` maps a block stored outside to its named-data key."""

    cmd_data: bytes
    weight_data: bytes
    scratch_size: int
    inputs: tuple[IoTensor, ...]
    outputs: tuple[IoTensor, ...]
    external: Mapping[str, str] = field(default_factory=dict)


def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _block(name: str, data: bytes, external: bool = False) -> bytes:
    header = name.encode("ascii").ljust(NAME, b"\0") + struct.pack("<IB", len(data), int(external)) + bytes(11)
    return header + data + bytes(_pad(len(data)) - len(data))


def _io(tensors: tuple[IoTensor, ...]) -> bytes:
    out = struct.pack("<i", len(tensors))
    for t in tensors:
        shape = (1,) * (6 - len(t.shape)) + tuple(t.shape)
        out += struct.pack("<9i", *shape, t.elem_size, t.offset, t.region)
    return out


def pack(blob: VelaBin) -> bytes:
    """The blob's bytes, every block inline."""
    if blob.cmd_data[:4] not in COMMAND_MAGICS:
        raise ValueError("cmd_data must start with COP1 or COP2")
    return b"".join((
        _block(BEGIN, b""), _block("cmd_data", blob.cmd_data), _block("weight_data", blob.weight_data),
        _block("scratch_size", struct.pack("<I", blob.scratch_size)), _block("inputs", _io(blob.inputs)),
        _block("outputs", _io(blob.outputs)), _block(END, b""),
    ))


def blocks(data: bytes | memoryview) -> list[tuple[str, int, bool, memoryview]]:
    """(name, offset of its header, external, data) of each block, checked as the C++ reader checks them."""
    view = memoryview(data)
    if len(view) < 2 * HEADER or len(view) % ALIGN:
        raise InvalidProgram(f"an Ethos-U blob of {len(view)} bytes: too short or not a multiple of {ALIGN}")
    found, at = [], 0
    while at < len(view):
        if at + HEADER > len(view):
            raise InvalidProgram(f"Ethos-U blob: a block header at byte {at} runs past the end ({len(view)})")
        raw = bytes(view[at:at + NAME])
        name = raw.split(b"\0", 1)[0].decode("ascii", "replace")
        size, external = struct.unpack_from("<IB", view, at + NAME)
        if name not in ORDER:
            raise InvalidProgram(f"Ethos-U blob: unknown block {name!r} at byte {at}")
        end = at + HEADER + _pad(size)
        if end > len(view):
            raise InvalidProgram(f"Ethos-U blob: block {name} at byte {at} ({size} bytes) runs past the end")
        found.append((name, at, bool(external), view[at + HEADER:at + HEADER + size]))
        at = end
        if name == END:
            break
    if not found or found[0][0] != BEGIN or found[-1][0] != END or at != len(view):
        raise InvalidProgram(f"Ethos-U blob: expected {BEGIN} first and {END} last, ending at the blob's end")
    return found


def parse(data: bytes | memoryview) -> VelaBin:
    """The blob's contents; InvalidProgram when its layout is not the one ExecuTorch's runtime reads."""
    found = {name: (external, payload) for name, _, external, payload in blocks(data)}
    missing = [name for name in ORDER if name not in found]
    if missing:
        raise InvalidProgram(f"Ethos-U blob: no {', '.join(missing)} block")
    external = {}
    for name, (is_external, payload) in found.items():
        if is_external:
            if len(payload) != KEY_CHARS:
                raise InvalidProgram(f"Ethos-U blob: external block {name} holds {len(payload)} bytes, not a key")
            external[name] = bytes(payload).decode("ascii")
    cmd = bytes(found["cmd_data"][1])
    if "cmd_data" not in external and cmd[:4] not in COMMAND_MAGICS:
        raise InvalidProgram("Ethos-U blob: cmd_data does not start with COP1 or COP2")
    (scratch,) = struct.unpack("<I", found["scratch_size"][1])
    return VelaBin(cmd, bytes(found["weight_data"][1]), scratch, _read_io(found["inputs"][1], "inputs"),
                   _read_io(found["outputs"][1], "outputs"), external)


def _read_io(payload: memoryview, name: str) -> tuple[IoTensor, ...]:
    if len(payload) < 4:
        raise InvalidProgram(f"Ethos-U blob: {name} block of {len(payload)} bytes")
    (count,) = struct.unpack_from("<i", payload)
    if count < 0 or len(payload) != 4 + 36 * count:
        raise InvalidProgram(f"Ethos-U blob: {name} says {count} tensors in {len(payload)} bytes")
    tensors = []
    for k in range(count):
        values = struct.unpack_from("<9i", payload, 4 + 36 * k)
        tensors.append(IoTensor(tuple(values[:6]), values[6], values[7], values[8]))
    return tuple(tensors)
