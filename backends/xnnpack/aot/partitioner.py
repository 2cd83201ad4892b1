"""XNNPACK's partitions: maximal connected groups of the calls it takes, deterministic.

torch's CapabilityBasedPartitioner grows groups so that contracting each one to a single
call leaves the graph acyclic; here groups are then ordered by their first call in graph
order and list their calls in graph order, so neither the hash seed nor set order changes
a build (RELEASE.md: ExecuTorch #19045). A group with fewer calls than `min_nodes`, or that
only relabels bytes (views, permutes of nothing computed, copies, fills), is left out with its reason.
"""

from __future__ import annotations

import operator

from torch.fx import Node

from etbuild.backends.aot import Proposal, supported_groups
from etbuild.backends.xnnpack.aot.ops.shape import FREE
from etbuild.backends.xnnpack.aot.support import reasons
from etbuild.backends.xnnpack.options import XnnpackOptions
from etbuild.graphs.method import GraphMethod


def propose(method: GraphMethod, options: XnnpackOptions) -> Proposal:
    """The groups XNNPACK takes in a method, and why it leaves the other calls out."""
    why = reasons(method.exported.graph, method.constants, options)
    groups = supported_groups(method, why)
    outside = {n: r for n, r in why.items() if r is not None}
    kept = []
    for group in groups:
        rejected = _rejected(group, options.min_nodes)
        if rejected is None:
            kept.append(tuple(group))
        else:
            outside.update(dict.fromkeys((n for n in group if n.target is not operator.getitem), rejected))
    return Proposal(tuple(kept), outside)


def _rejected(group: list[Node], min_nodes: int) -> str | None:
    calls = [n for n in group if n.target is not operator.getitem]
    if len(calls) < min_nodes:
        return f"its partition has {len(calls)} call(s), fewer than option min_nodes ({min_nodes})"
    if all(n.target in FREE for n in calls):
        return "its partition only relabels bytes (views, copies, fills): not worth a delegate call"
    return None
