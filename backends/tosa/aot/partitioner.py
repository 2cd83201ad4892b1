"""TOSA partitions: maximal connected groups of the int8-domain calls support.py takes, deterministic.

As XNNPACK's (etbuild.backends.xnnpack.aot.partitioner): torch's CapabilityBasedPartitioner grows acyclic
groups; they are ordered by their first call and list their calls in graph order. A group without a call
worth a delegate (convolution, linear, add, pool, mean) is left out with its reason.
"""

from __future__ import annotations

import operator

from etbuild.backends.aot import Proposal, supported_groups
from etbuild.backends.tosa.aot.support import WORK, Check, reasons
from etbuild.graphs.method import GraphMethod


def propose(method: GraphMethod, check: Check | None = None) -> Proposal:
    """The int8 groups a TOSA target takes in a method (with a target's `check`), and why the rest stays out."""
    why = reasons(method.exported.graph, method.constants, check)
    groups = supported_groups(method, why)
    outside = {n: r for n, r in why.items() if r is not None}
    kept = []
    for group in groups:
        if any(n.target in WORK for n in group):
            kept.append(tuple(group))
        else:
            reason = "its partition has no convolution, linear, add, pool or mean: not worth a delegate call"
            outside.update(dict.fromkeys((n for n in group if n.target is not operator.getitem), reason))
    return Proposal(tuple(kept), outside)
