"""TOSA partitions: maximal connected groups of the int8-domain calls support.py takes, deterministic.

As XNNPACK's (etbuild.backends.xnnpack.aot.partitioner): torch's CapabilityBasedPartitioner grows acyclic
groups; they are ordered by their first call and list their calls in graph order. A group without a call
worth a delegate (convolution, linear, add, pool, mean) is left out with its reason.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

import torch
from torch.fx import Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from etbuild.backends.aot import Proposal
from etbuild.backends.tosa.aot.support import WORK, Check, reasons
from etbuild.lowering.forms import GraphMethod


class _Taken(OperatorSupportBase):
    def __init__(self, taken: Mapping[Node, str | None]) -> None:
        self.taken = taken

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: Node) -> bool:
        return node in self.taken and self.taken[node] is None


def propose(method: GraphMethod, check: Check | None = None) -> Proposal:
    """The int8 groups a TOSA target takes in a method (with a target's `check`), and why the rest stays out."""
    why = reasons(method.exported.graph, method.constants, check)
    order = {n: k for k, n in enumerate(method.exported.graph.nodes)}
    partitioner = CapabilityBasedPartitioner(method.exported.graph_module, _Taken(why),
                                             allows_single_node_partition=True)
    groups = sorted((sorted(p.nodes, key=order.__getitem__) for p in partitioner.propose_partitions()),
                    key=lambda nodes: order[nodes[0]])
    outside = {n: r for n, r in why.items() if r is not None}
    kept = []
    for group in groups:
        if any(n.target in WORK for n in group):
            kept.append(tuple(group))
        else:
            reason = "its partition has no convolution, linear, add, pool or mean: not worth a delegate call"
            outside.update(dict.fromkeys((n for n in group if n.target is not operator.getitem), reason))
    return Proposal(tuple(kept), outside)
