"""What a runtime needs to know of a TOSA flatbuffer before running it: its main block's input and output
names (`tosa.fbs`: TosaGraph.regions[0].blocks[0].{inputs, outputs}), read with the flatbuffers package
alone. Torch-free; the reference model itself is only needed to run the graph.
"""

from __future__ import annotations

from flatbuffers.table import Table

from etbuild.errors import InvalidProgram

IDENTIFIER = b"TOSA"
GRAPH_REGIONS, REGION_BLOCKS, BLOCK_INPUTS, BLOCK_OUTPUTS = 1, 1, 3, 4


def _field(table: Table, index: int) -> int:
    return table.Offset(4 + 2 * index)


def _vector_tables(table: Table, index: int) -> list[Table]:
    at = _field(table, index)
    if not at:
        return []
    start, count = table.Vector(at), table.VectorLen(at)
    return [Table(table.Bytes, table.Indirect(start + 4 * k)) for k in range(count)]


def _strings(table: Table, index: int) -> list[str]:
    at = _field(table, index)
    if not at:
        return []
    start = table.Vector(at)
    return [table.String(start + 4 * k).decode("utf-8") for k in range(table.VectorLen(at))]


def block_io(data: bytes) -> tuple[list[str], list[str]]:
    """(input names, output names) of the graph's first block; InvalidProgram when it is no TOSA graph."""
    if len(data) < 8 or data[4:8] != IDENTIFIER:
        raise InvalidProgram("a TOSA graph must be a flatbuffer with file identifier 'TOSA'")
    try:
        root = Table(bytearray(data), int.from_bytes(data[:4], "little"))
        regions = _vector_tables(root, GRAPH_REGIONS)
        blocks = _vector_tables(regions[0], REGION_BLOCKS) if regions else []
        if not blocks:
            raise InvalidProgram("a TOSA graph without a block")
        return _strings(blocks[0], BLOCK_INPUTS), _strings(blocks[0], BLOCK_OUTPUTS)
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise InvalidProgram(f"a malformed TOSA flatbuffer: {exc}") from None
