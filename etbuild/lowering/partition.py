"""The partition lowering step: each backend a recipe names takes the parts of a method it can run.

Takes: core-ATen graphs (after fuse-batch-norm). Gives: core-ATen graphs with delegates:
each partition a backend proposed is replaced by one `call_module` node whose module is a
`Delegate` (the backend's id and the blob its preprocess made), and getitem nodes that pick
its outputs. Backends run in the recipe's order, each on what the ones before left. The
program carries a `PartitionReport`: what went where, and why the rest stayed outside.

A backend's AOT half (`BACKENDS[name].aot`, a module exposing BACKEND) satisfies
`etbuild.backends.aot.AotBackend`: `partition` proposes groups of nodes (in graph order, acyclic once each is
contracted to one node) and says why it leaves the others out; `preprocess` turns one group,
as a `Subgraph`, into a blob and the named data its weights live in. Generic code names no
backend.
"""

from __future__ import annotations

import heapq
import importlib
import operator
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch.fx import Graph, Node

from etbuild.backends.aot import AotBackend, Processed, Subgraph
from etbuild.backends.options import parse_options
from etbuild.lowering.forms import GraphMethod, GraphProgram
from etbuild.lowering.partition_report import MethodPartitions, OutsideNode, PartitionInfo, PartitionReport
from etbuild.lowering.sources import node_location
from etbuild.lowering.steps import at_node, in_method
from etbuild.runtime.backend_registry import BACKENDS, backend_options


class Delegate(torch.nn.Module):
    """What a delegate's call_module node names: a backend's processed partition, and the names
    of the calls it runs (for the ETRecord's debug handles)."""

    def __init__(self, name: str, backend_id: str, processed: Processed, sub: Subgraph) -> None:
        super().__init__()
        self.backend_name, self.backend_id, self.processed = name, backend_id, processed
        self.input_count, self.output_count = len(sub.inputs), len(sub.outputs)
        self.node_names = tuple(n.name for n in sub.nodes if n.target is not operator.getitem)

    def forward(self, *args: Any) -> Any:
        raise NotImplementedError(f"a {self.backend_id} delegate runs in a runtime, not in torch")


def aot_backend(name: str) -> AotBackend:
    return importlib.import_module(BACKENDS[name].aot).BACKEND  # type: ignore[no-any-return]


def backend_operators(backends: tuple[Any, ...]) -> frozenset[Any]:
    """The operators some backend of `backends` (BackendConfigs) may take."""
    return frozenset().union(*(aot_backend(cfg.name).operators() for cfg in backends))


def partition(program: GraphProgram) -> GraphProgram:
    """Every method with the partitions of each backend of `program.backends` delegated."""
    if not program.backends:
        return program
    reports = []
    for method in program.methods:
        with in_method(method.name):
            reports.append(_partition_method(method, program.backends))
    return replace(program, report=PartitionReport(tuple(b.name for b in program.backends), tuple(reports)))


def compute_nodes(method: GraphMethod) -> list[Node]:
    """The calls a method makes at run time: call nodes that are neither constants nor getitems."""
    return [n for n in method.exported.graph.nodes
            if n.op == "call_function" and n not in method.constants and n.target is not operator.getitem]


def _partition_method(method: GraphMethod, backends: tuple[Any, ...]) -> MethodPartitions:
    total = compute_nodes(method)
    infos: list[PartitionInfo] = []
    outside: dict[Node, str] = {}
    groups: dict[Node, int] = {}
    for cfg in backends:
        aot = aot_backend(cfg.name)
        options = parse_options(backend_options(cfg.name), cfg.options, cfg.name)
        proposal = aot.partition(method, options)
        outside.update(proposal.outside)
        for group in proposal.groups:
            info = _delegate(method, cfg.name, aot, options, group, len(infos))
            groups.update(dict.fromkeys(group, len(infos)))
            infos.append(info)
    left = [OutsideNode(n.name, operator_name(n.target), outside.get(n, "no backend takes it"), node_location(n))
            for n in total if n not in groups]
    drawing = tuple((n.name, operator_name(n.target), groups.get(n, -1), tuple(a.name for a in n.all_input_nodes))
                    for n in total)
    return MethodPartitions(method.name, len(total), tuple(infos), tuple(left), drawing)


def _delegate(method: GraphMethod, name: str, aot: AotBackend, options: Any, group: tuple[Node, ...],
              index: int) -> PartitionInfo:
    """Preprocess one group and splice its delegate call into the graph in its place."""
    sub = subgraph(group, method.constants)
    with at_node(group[0]):
        processed = aot.preprocess(sub, options)
    operators: dict[str, int] = {}
    for n in group:
        if n.target is not operator.getitem:
            operators[operator_name(n.target)] = operators.get(operator_name(n.target), 0) + 1
    splice(method, sub, Delegate(name, BACKENDS[name].id, processed, sub), f"delegate_{index}")
    return PartitionInfo(
        index=index, backend=name, nodes=sum(operators.values()), operators=dict(sorted(operators.items())),
        backend_nodes=dict(sorted(processed.nodes.items())), blob_bytes=len(processed.blob),
        named_data_bytes=sum(len(v) for v in processed.named_data.values()), inputs=len(sub.inputs),
        outputs=len(sub.outputs),
    )


def subgraph(group: tuple[Node, ...], constants: Mapping[Node, torch.Tensor]) -> Subgraph:
    """The group's nodes, inputs and outputs. A symbolic size read by a member (a view's size) is no
    input: the delegate resizes its values from its tensor inputs' shapes."""
    members = set(group)
    inputs: dict[Node, None] = {}
    for n in group:
        for a in n.all_input_nodes:
            if a not in members and a not in constants and not isinstance(a.meta.get("val"), torch.SymInt):
                inputs.setdefault(a)
    outputs = tuple(n for n in group if any(u not in members for u in n.users))
    return Subgraph(tuple(group), tuple(inputs), outputs, constants)


def splice(method: GraphMethod, sub: Subgraph, module: Delegate, name: str) -> None:
    """Replace the subgraph's nodes by one call of `module`, then restore a topological order."""
    gm, graph = method.exported.graph_module, method.exported.graph
    gm.add_submodule(name, module)
    members = set(sub.nodes)
    with graph.inserting_after(sub.nodes[-1]):
        call = graph.call_module(name, tuple(sub.inputs))
    call.meta["val"] = tuple(o.meta.get("val") for o in sub.outputs)
    for k, out in enumerate(sub.outputs):
        with graph.inserting_after(call):
            item = graph.call_function(operator.getitem, (call, k))
        item.meta = {**out.meta, "delegated_from": out.target}  # what the value was computed by
        out.replace_all_uses_with(item, delete_user_cb=lambda user: user not in members)
    for node in reversed(sub.nodes):
        graph.erase_node(node)
    stable_sort(graph)


def stable_sort(graph: Graph) -> None:
    """Reorder the graph's nodes in place into a topological order that keeps the present order
    wherever the dependencies allow (nodes are moved, not copied: references to them stay valid)."""
    position = {n: k for k, n in enumerate(graph.nodes)}
    waiting = {n: len(n.all_input_nodes) for n in graph.nodes}
    ready = [(position[n], n) for n in graph.nodes if waiting[n] == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for user in node.users:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (position[user], user))
    for before, node in zip(order, order[1:]):
        if before.next is not node:
            before.append(node)


def operator_name(target: Any) -> str:
    """`aten::addmm` (`.overload` added unless it is `default`); other callables by name."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return getattr(target, "__name__", str(target))
    overload = schema.overload_name
    return schema.name + (f".{overload}" if overload and overload != "default" else "")
