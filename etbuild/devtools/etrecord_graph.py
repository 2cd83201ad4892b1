"""A method's graph as the ETRecord stores it: an exported program in ExecuTorch's serde layout,
with a `debug_handle` on every call.

torch's graph serializer writes the graph (`torch._export.serde.serialize.GraphModuleSerializer`,
schema 8.x; without `serialize`'s validation and canonical-form check, which deep-copy the
program and took most of the time: 1.4 s of the `cnn` recipe's lower stage); ExecuTorch's
deserializer (`executorch.exir.serde`, which its Inspector uses on an ETRecord) reads an older
fork of that schema (5.4), which lacks some fields: they are dropped here, and `debug_handle`
(which torch's serializer does not write) is added to each call node's metadata, as a decimal
string. The nodes keep their `nn_module_stack` (the user's module path) and `stack_trace`,
which is what the Inspector shows per event; `from_node` (the passes' history, with object ids
that change from run to run) is dropped, so the same program gives the same bytes. Weights are
not stored (an empty state dict): naming operators needs none.
"""

from __future__ import annotations

import io
import json
import operator
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch._export.serde import serialize as torch_serde
from torch.export import ExportedProgram
from torch.fx import Node

from etbuild.errors import StageError

SCHEMA_VERSION = {"major": 5, "minor": 4}  # executorch.exir.serde.schema (ExecuTorch 1.5.1)
DIALECT = "ATEN"  # core ATen: what our graphs hold before partitioning
_DROPPED = {  # fields of torch's schema that ExecuTorch's fork lacks, by the table holding them
    "graph_module": ("metadata", "treespec_namedtuple_fields"),
    "graph": ("sym_float_values",),
    "node": ("is_hop_single_tensor_return",),
    "named_argument": ("kind",),
    "module_call_signature": ("forward_arg_names",),
}


@dataclass(frozen=True)
class SerializedGraph:
    """One method's entries of an ETRecord (exir.serde's SerializedArtifact) and its call nodes' handles."""

    program: bytes
    state_dict: bytes
    constants: bytes
    example_inputs: bytes
    handles: dict[str, int]  # call node name -> debug handle


def call_nodes(ep: ExportedProgram) -> list[Node]:
    """The calls the serializer writes one node for, in graph order (getitems fold into their producer)."""
    return [n for n in ep.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def serialize_graph(ep: ExportedProgram, first_handle: int = 1) -> SerializedGraph:
    """`ep` in the layout ExecuTorch's ETRecord reader deserializes, handles numbered from `first_handle`.

    torch serializes only graphs whose constants are inputs (no tensor `get_attr`), so the lower
    stage serializes the graph before a step adds those (fuse-batch-norm)."""
    try:
        data = _program_json(ep)
    except Exception as exc:  # torch raises many kinds for graphs it cannot write
        raise StageError(f"etrecord: torch cannot serialize the graph ({type(exc).__name__}: {exc})") from None
    calls = call_nodes(ep)
    nodes = data["graph_module"]["graph"]["nodes"]
    if len(nodes) != len(calls):
        raise StageError(f"etrecord: the serialized graph has {len(nodes)} calls, the graph {len(calls)}")
    handles = {n.name: first_handle + k for k, n in enumerate(calls)}
    for k, node in enumerate(nodes):
        node["metadata"]["debug_handle"] = str(first_handle + k)
    _downgrade(data)
    return SerializedGraph(json.dumps(data).encode(), _saved({}), _saved({}), b"", handles)


def _program_json(ep: ExportedProgram) -> dict[str, Any]:
    """The program as torch's serializer writes it, without what `torch_serde.serialize` adds around it
    (its validation and its canonical-form check, a deep copy that costs more than the rest)."""
    graph_module = torch_serde.GraphModuleSerializer(ep.graph_signature, ep.module_call_graph).serialize(
        ep.graph_module)
    return {
        "graph_module": json.loads(torch_serde._to_json_bytes(graph_module)),
        "opset_version": {"aten": torch._C._get_max_operator_version()},
        "range_constraints": json.loads(torch_serde._to_json_bytes(
            torch_serde.serialize_range_constraints(ep.range_constraints))),
    }


def _saved(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _downgrade(program: dict[str, Any]) -> None:
    """torch's schema → ExecuTorch's fork of it (module docstring), in place."""
    program["schema_version"] = dict(SCHEMA_VERSION)
    program["dialect"] = DIALECT
    gm = program["graph_module"]
    _drop(gm, "graph_module")
    _downgrade_graph(gm["graph"])
    _plain_exprs(gm["graph"])
    for entry in gm.get("module_call_graph") or []:
        if entry.get("signature"):
            _drop(entry["signature"], "module_call_signature")


def _plain_exprs(value: Any) -> None:
    """Symbolic sizes as the fork writes them, `2*s31`, not torch 2.13's `srepr`
    (`Mul(Integer(2), Symbol('s31', positive=True, integer=True))`), in place."""
    if isinstance(value, dict):
        expr = value.get("as_expr")
        if isinstance(expr, dict) and isinstance(expr.get("expr_str"), str):
            expr["expr_str"] = str(sympy.sympify(expr["expr_str"]))
        for v in value.values():
            _plain_exprs(v)
    elif isinstance(value, list):
        for v in value:
            _plain_exprs(v)


def _downgrade_graph(graph: dict[str, Any]) -> None:
    _drop(graph, "graph")
    for node in graph["nodes"]:
        _drop(node, "node")
        node["metadata"].pop("from_node", None)  # pass history with object ids: same program, other bytes
        for arg in node["inputs"]:
            _drop(arg, "named_argument")
            nested = (arg.get("arg") or {}).get("as_graph")
            if nested:
                _downgrade_graph(nested["graph"])


def _drop(table: dict[str, Any], kind: str) -> None:
    for key in _DROPPED[kind]:
        table.pop(key, None)
