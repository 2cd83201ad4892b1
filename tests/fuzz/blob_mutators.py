"""Mutators of the XNNPACK delegate blobs inside a `.pte` (the program around them is kept).

- `BlobByteMutator` overwrites 1–6 bytes of one delegate's blob: mostly its header and
  FlatBuffer graph, sometimes its constant region.
- `BlobStructureMutator` decodes one blob's graph, changes one thing (a node's value ids or
  parameters, a node's kind, a node dropped or moved, a value's dims, datatype, external id,
  flags or quant params, a constant's offset, size or key, the graph's input/output ids) and
  writes the blob again in place of the old one (segments re-laid out).

Field values come from the schema's type of each field (uint, int, ulong, float, enum), so an
edit stays encodable and probes the field's whole range.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.blob import read_blob, read_header, write_blob, xnnpack_schema
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program, segment_bytes, write_program
from tests.fuzz.mutators import BYTE_VALUES, _pick, writable

BOUNDS = {"uint": (0, (1 << 32) - 1), "int": (-(1 << 31), (1 << 31) - 1), "ulong": (0, (1 << 64) - 1),
          "short": (-(1 << 15), (1 << 15) - 1), "ubyte": (0, 255)}
FLOATS = (0.0, -0.0, -1.0, 1e-30, 1e30, 3.0, float("inf"), float("-inf"), float("nan"))
NONE_ID = (1 << 32) - 1


def delegate_segments(data: bytes) -> list[int]:
    """The segment indices that hold an XnnpackBackend delegate's blob."""
    program, _ = read_program(data)
    return [d.processed.index for plan in program.execution_plan for d in plan.delegates
            if d.id == "XnnpackBackend" and d.processed is not None and d.processed.location == fb.DataLocation.SEGMENT]


@dataclass(frozen=True)
class BlobByteMutator:
    """Overwrites 1–`max_edits` bytes of one delegate blob (9 in 10 in its header and FlatBuffer)."""

    name: str = "blob-bytes"
    max_edits: int = 6

    def mutate(self, data: bytes, rng: random.Random) -> bytes:
        program, header = read_program(data)
        index = rng.choice(delegate_segments(data))
        blob = segment_bytes(data, program, header, index)
        start = header.segment_base_offset + program.segments[index].offset
        head = read_header(blob)
        graph_end = len(blob) if head is None or rng.random() < 0.1 else head.constant_offset
        out = bytearray(data)
        for _ in range(rng.randint(1, self.max_edits)):
            pos = start + rng.randrange(max(graph_end, 1))
            out[pos] = rng.choice(BYTE_VALUES) if rng.random() < 0.5 else rng.randrange(256)
        return bytes(out)


@dataclass(frozen=True)
class BlobStructureMutator:
    """Decodes one delegate's graph, applies one edit of `BLOB_EDITS`, writes the blob back."""

    name: str = "blob-structure"

    def mutate(self, data: bytes, rng: random.Random) -> bytes:
        program, header = read_program(data)
        index = rng.choice(delegate_segments(data))
        segments = [bytes(segment_bytes(data, program, header, k)) for k in range(len(program.segments))]
        blob = read_blob(segments[index])
        for _ in range(8):  # an edit may not apply (no quantized values, one node): try another
            if BLOB_EDITS[rng.choice(sorted(BLOB_EDITS))](blob.graph, rng) is not None:
                break
        segments[index] = write_blob(blob.graph, bytes(blob.constants))
        writable(program)
        return write_program(program, segments)


# ----------------------------------------------------------------------------- graph edits
# Each edit changes one part of the graph and returns what it did, or None when it does not apply.


@cache
def field_types() -> dict[str, dict[str, tuple[str, bool]]]:
    """table name -> field name -> (scalar type name, is a vector), for the scalar and enum fields."""
    schema = xnnpack_schema()
    return {table: {f.name: (f.type.name, f.type.vector) for f in fields if f.type.kind in ("scalar", "enum")}
            for table, fields in schema.tables.items()}


def _table(obj: Any) -> str:
    name = type(obj).__name__
    return xnnpack_schema().aliases.get(name, name)


def _value(rng: random.Random, type_name: str, near: Any, ids: int) -> Any:
    if type_name == "float":
        return rng.choice(FLOATS)
    bounds = BOUNDS[type_name]
    if type_name == "uint" and rng.random() < 0.3:
        return rng.choice([rng.randrange(ids), ids, NONE_ID])  # another value id, one past the last, "none"
    return _pick(rng, bounds, near if isinstance(near, int) else None)


def edit_field(obj: Any, rng: random.Random, ids: int) -> str | None:
    """One scalar field, or one item of a scalar vector, of obj set to an interesting value."""
    types = field_types().get(_table(obj), {})
    if not types:
        return None
    name = rng.choice(sorted(types))
    type_name, vector = types[name]
    current = getattr(obj, name)
    if not vector:
        setattr(obj, name, _value(rng, type_name, current, ids))
        return name
    items = list(current)
    choice = rng.randrange(3)
    if choice == 0 and items:
        items.pop(rng.randrange(len(items)))
    elif choice == 1 or not items:
        items.insert(rng.randrange(len(items) + 1), _value(rng, type_name, None, ids))
    else:
        k = rng.randrange(len(items))
        items[k] = _value(rng, type_name, items[k], ids)
    setattr(obj, name, bytes(items) if type_name == "ubyte" else items)
    return f"{name} items"


def _tensor(xv: g.XValue) -> g.TensorValue | None:
    v = xv.value
    return v.tensor_value if isinstance(v, g.QuantizedTensorValue) else v


def edit_node(graph: g.XNNGraph, rng: random.Random) -> str | None:
    """A field of a node: a value id, a kernel size, a padding, a permutation…"""
    nodes = [n.node for n in graph.xnodes if n.node is not None]
    return edit_field(rng.choice(nodes), rng, len(graph.xvalues)) if nodes else None


def edit_value(graph: g.XNNGraph, rng: random.Random) -> str | None:
    """A field of a tensor value: datatype, dims, constant index, external id, flags, id."""
    tensors = [t for t in map(_tensor, graph.xvalues) if t is not None]
    return edit_field(rng.choice(tensors), rng, len(graph.xvalues)) if tensors else None


def edit_quant(graph: g.XNNGraph, rng: random.Random) -> str | None:
    """A field of a quantized value's params (scale, zero point, channel dim…), or the params dropped."""
    quantized = [xv.value for xv in graph.xvalues if isinstance(xv.value, g.QuantizedTensorValue)]
    if not quantized:
        return None
    q = rng.choice(quantized)
    if q.quant_params is None or rng.random() < 0.1:
        q.quant_params = None
        return "quant params dropped"
    return edit_field(q.quant_params, rng, len(graph.xvalues))


def edit_constant(graph: g.XNNGraph, rng: random.Random) -> str | None:
    """A constant's offset or size, its named key, or its buffer."""
    if graph.constant_data and rng.random() < 0.8:
        c = rng.choice(graph.constant_data)
        if c.named_key is not None and rng.random() < 0.3:
            c.named_key = rng.choice(["", "x", c.named_key + "x", None])
            return "constant key"
        return edit_field(c, rng, len(graph.xvalues))
    if graph.constant_buffer:
        b = rng.choice(graph.constant_buffer)
        b.storage = bytes(b.storage)[: rng.randrange(len(b.storage) + 1)]
        return "constant buffer"
    return None


def edit_node_kind(graph: g.XNNGraph, rng: random.Random) -> str | None:
    """A node becomes another kind, keeping the fields the two kinds share."""
    xnodes = [n for n in graph.xnodes if n.node is not None]
    if not xnodes:
        return None
    xnode = rng.choice(xnodes)
    target = g.MIRROR_TYPES[rng.choice(sorted(xnnpack_schema().unions["NodeUnion"]))]
    old = {f.name: getattr(xnode.node, f.name) for f in dataclasses.fields(xnode.node)}
    xnode.node = target(**{f.name: old[f.name] for f in dataclasses.fields(target) if f.name in old})
    return "node kind"


def edit_nodes(graph: g.XNNGraph, rng: random.Random) -> str | None:
    """A node dropped, duplicated or moved; or its output clamp changed."""
    if not graph.xnodes:
        return None
    k = rng.randrange(len(graph.xnodes))
    choice = rng.randrange(4)
    if choice == 0:
        graph.xnodes.pop(k)
    elif choice == 1:
        graph.xnodes.insert(rng.randrange(len(graph.xnodes) + 1), graph.xnodes[k])
    elif choice == 2:
        graph.xnodes.insert(rng.randrange(len(graph.xnodes) + 1), graph.xnodes.pop(k))
    else:
        graph.xnodes[k].output_min_max = g.OutputMinMax(rng.choice(FLOATS), rng.choice(FLOATS))
    return "nodes"


def edit_graph(graph: g.XNNGraph, rng: random.Random) -> str | None:
    """The graph's input or output ids, or its extern count; or a value dropped."""
    if graph.xvalues and rng.random() < 0.2:
        graph.xvalues.pop(rng.randrange(len(graph.xvalues)))
        return "value dropped"
    return edit_field(graph, rng, len(graph.xvalues))


BLOB_EDITS: dict[str, Callable[[g.XNNGraph, random.Random], str | None]] = {
    "node": edit_node,
    "value": edit_value,
    "quant": edit_quant,
    "constant": edit_constant,
    "node kind": edit_node_kind,
    "nodes": edit_nodes,
    "graph": edit_graph,
}
