"""XNNPACK's preprocess: one partition → an `XnnpackBackend` blob and the named data of its weights."""

from __future__ import annotations

from collections import Counter

from etbuild.backends.aot import Processed, Subgraph
from etbuild.backends.xnnpack.aot.debug import debug_map
from etbuild.backends.xnnpack.aot.emitter import Emitter
from etbuild.backends.xnnpack.aot.ops import RULES
from etbuild.backends.xnnpack.format.blob import write_blob


def preprocess(sub: Subgraph) -> Processed:
    """The blob (header, FlatBuffer graph, no constant region: every weight is named data), and
    which calls each node lowers (etbuild.backends.xnnpack.aot.debug)."""
    emitter = Emitter(sub)
    graph = emitter.run({target: rule.emit for target, rule in RULES.items()})
    kinds = Counter(type(n.node).__name__ for n in graph.xnodes)
    return Processed(write_blob(graph), dict(emitter.b.named_data), dict(sorted(kinds.items())),
                     debug_map=debug_map(graph, sub.nodes, emitter.fused))
