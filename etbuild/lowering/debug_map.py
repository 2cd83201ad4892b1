"""The debug map: which graph node each program value holds, for tools that compare with torch.

The to-program step records, per method, every value a call of the method's graph writes: the
fx node (in the core-ATen graph that step converts), the operator, and the module path and
class from the node's `nn_module_stack`; a node with several results maps each result value
with its position. The lower stage writes the map beside the program as
`lowered.debug.json`; it is not part of the program, so the `.pte` bytes do not change.
Node names come from the deterministic lowering, so the same export gives the same map.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torch.fx import Graph, Node

from etbuild.errors import StageError
from etbuild.lowering.sources import module_of

VERSION = 1


@dataclass(frozen=True)
class ValueSource:
    """Where one program value comes from: node `node` (its result `item` when it has several)."""

    node: str
    op: str
    module: str  # `encoder.layer.3.attention`, '' at the root or when the node does not say
    module_type: str  # `MultiheadAttention`
    item: int | None = None


DebugMap = Mapping[str, Mapping[int, ValueSource]]  # method -> value index -> source


def value_sources(graph: Graph, env: Mapping[Node, Any]) -> dict[int, ValueSource]:
    """The sources of the values that the calls of `graph` (not of its subgraphs) write."""
    out: dict[int, ValueSource] = {}
    for node, value in env.items():
        if node.op != "call_function" or node.graph is not graph or node.target is operator.getitem:
            continue
        path, cls = module_of(node)
        op = str(node.target)
        if isinstance(value, int):
            out[value] = ValueSource(node.name, op, path, cls)
        elif isinstance(value, list):
            for k, v in enumerate(value):
                if isinstance(v, int):
                    out[v] = ValueSource(node.name, op, path, cls, k)
    return out


def to_json(debug: DebugMap) -> dict[str, Any]:
    """The map as JSON (value indices as sorted keys)."""
    return {"version": VERSION, "methods": {
        m: {str(i): asdict(s) for i, s in sorted(values.items())} for m, values in sorted(debug.items())
    }}


def read_debug_map(path: Path) -> dict[str, dict[int, ValueSource]]:
    """A map written by `to_json`; StageError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
        return {m: {int(i): ValueSource(**s) for i, s in values.items()} for m, values in data["methods"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StageError(f"{path}: not a debug map of the lower stage ({exc})") from None
