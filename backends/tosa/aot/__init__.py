"""The TOSA backend's AOT half (imports torch): int8 partitions → TOSA 1.0 flatbuffers.

support.py (which calls, why not the others), partitioner.py (groups), lower.py with compute.py and
shape.py (the walk into tosa_serializer), quant.py (q/dq parameters), rescale.py (fixed-point factors).
The blob of a `TOSABackend` delegate is the flatbuffer itself; its compile spec `tosa_spec` names the profile.
"""

from __future__ import annotations

from typing import Any

from etbuild.backends.aot import Processed, Proposal, Subgraph
from etbuild.backends.tosa.aot.lower import RULES, lower_subgraph
from etbuild.backends.tosa.aot.partitioner import propose
from etbuild.backends.tosa.options import TOSA_SPEC, TosaOptions
from etbuild.graphs.method import GraphMethod


class TosaAot:
    """The AOT half of the TOSA backend (backend id `TOSABackend`)."""

    id = "TOSABackend"

    def partition(self, method: GraphMethod, options: TosaOptions) -> Proposal:
        return propose(method)

    def preprocess(self, sub: Subgraph, options: TosaOptions) -> Processed:
        lowered = lower_subgraph(sub)
        return Processed(lowered.tosa, {}, lowered.operators, (("tosa_spec", TOSA_SPEC.encode()),))

    def operators(self) -> frozenset[Any]:
        return frozenset(RULES)


BACKEND = TosaAot()

__all__ = ["BACKEND", "TosaAot"]
