"""The XNNPACK backend's AOT half (imports torch): partition a core-ATen graph, preprocess each partition.

`BACKEND` is what the partition lowering step (etbuild.lowering.partition) loads for the
recipe name `xnnpack`. The pieces: support.py (which calls it takes, why not the others),
partitioner.py (maximal groups, deterministic), ops/ (one rule per operator: its check and
how it becomes XNNPACK nodes), emitter.py and layout.py (values, layouts, conversions),
builder.py (the graph and its named data), preprocess.py (the blob).
"""

from __future__ import annotations

from typing import Any

from etbuild.backends.aot import Processed, Proposal, Subgraph
from etbuild.backends.xnnpack.aot.ops import RULES
from etbuild.backends.xnnpack.aot.partitioner import propose
from etbuild.backends.xnnpack.aot.preprocess import preprocess
from etbuild.backends.xnnpack.options import XnnpackOptions
from etbuild.graphs.method import GraphMethod


class XnnpackAot:
    """The AOT half of the XNNPACK backend (backend id `XnnpackBackend`)."""

    id = "XnnpackBackend"

    def partition(self, method: GraphMethod, options: XnnpackOptions) -> Proposal:
        return propose(method, options)

    def preprocess(self, sub: Subgraph, options: XnnpackOptions) -> Processed:
        return preprocess(sub)

    def operators(self) -> frozenset[Any]:
        return frozenset(RULES)


BACKEND = XnnpackAot()

__all__ = ["BACKEND", "XnnpackAot"]
