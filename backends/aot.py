"""The AOT half of the backend contract: what a backend's build side gives the partition step.

A backend's AOT module (`BACKENDS[name].aot` in etbuild.runtime.backend_registry) exposes
`BACKEND`, an `AotBackend`: `partition` proposes groups of a method's nodes it can run (in
graph order, acyclic once each is contracted to one node) and says why it leaves the others
out; `preprocess` turns one group, as a `Subgraph`, into a blob and the named data its weights
live in. The partitioning algorithm that calls these is `etbuild.lowering.partition`; the
runtime half of the contract is `etbuild.runtime.backend_registry.RuntimeBackend`. Build side:
imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.fx import Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from etbuild.graphs.method import GraphMethod


@dataclass(frozen=True)
class Subgraph:
    """One partition: its nodes in graph order, the values it reads from outside (in order of
    first use; constants excluded) and the values used outside it (in graph order)."""

    nodes: tuple[Node, ...]
    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]
    constants: Mapping[Node, torch.Tensor]


@dataclass(frozen=True)
class Processed:
    """What a backend's preprocess made of a Subgraph: the blob, the named data its constants
    live in (key -> bytes, shared across delegates by key), the node kinds in the blob, and the
    debug map: each id the backend's runtimes profile a node by (`delegate_debug_id_str`) ->
    the names of the Subgraph's calls that node lowers (for the ETRecord's delegate map)."""

    blob: bytes
    named_data: Mapping[str, bytes]
    nodes: Mapping[str, int] = field(default_factory=dict)
    compile_specs: tuple[tuple[str, bytes], ...] = ()
    debug_map: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Proposal:
    """A backend's partitions (node groups in graph order) and the reason for each node left out."""

    groups: tuple[tuple[Node, ...], ...]
    outside: Mapping[Node, str]


class AotBackend(Protocol):
    """The AOT half of a backend."""

    def partition(self, method: GraphMethod, options: Any) -> Proposal:
        """Propose partitions of the method's call nodes not yet delegated (constants excluded)."""
        ...

    def preprocess(self, sub: Subgraph, options: Any) -> Processed:
        """The blob that runs one partition."""
        ...

    def operators(self) -> frozenset[Any]:
        """Every operator it may take: lowering keeps these whole even where ExecuTorch's kernels lack them."""
        ...


class _Taken(OperatorSupportBase):
    def __init__(self, taken: Mapping[Node, str | None]) -> None:
        self.taken = taken

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: Node) -> bool:
        return node in self.taken and self.taken[node] is None


def supported_groups(method: GraphMethod, why: Mapping[Node, str | None]) -> list[list[Node]]:
    """The maximal connected groups of the nodes a backend takes (`why[node] is None`), each in graph order, the
    groups ordered by their first node: what a backend's `propose` then keeps or turns down."""
    order = {n: k for k, n in enumerate(method.exported.graph.nodes)}
    partitioner = CapabilityBasedPartitioner(method.exported.graph_module, _Taken(why),
                                             allows_single_node_partition=True)
    return sorted((sorted(p.nodes, key=order.__getitem__) for p in partitioner.propose_partitions()),
                  key=lambda nodes: order[nodes[0]])
