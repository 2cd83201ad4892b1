"""What the partition step did, per method: each delegate's contents and every call left outside, with why.

`PartitionReport.to_json()` is `partition.json` beside the `.pte`; `partition_svg` draws the
graph with each partition in its colour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PARTITION_FILES = ("partition.json", "partition.svg")  # written beside the .pte


@dataclass(frozen=True)
class PartitionInfo:
    """One delegate: its backend, the operators it took (by name, with counts) and its sizes."""

    index: int
    backend: str
    nodes: int
    operators: Mapping[str, int]
    backend_nodes: Mapping[str, int]  # node kinds inside the blob
    blob_bytes: int
    named_data_bytes: int
    inputs: int
    outputs: int


@dataclass(frozen=True)
class OutsideNode:
    """A call no backend took, and why (`aten::native_layer_norm: float64 not supported`)."""

    node: str
    operator: str
    reason: str
    source: str


@dataclass(frozen=True)
class MethodPartitions:
    """One method: how many calls it makes, its delegates, the calls left outside.

    drawing: per call (graph order) its name, operator, delegate index (-1: outside) and the
    names of the nodes it reads; for the picture only."""

    method: str
    compute_nodes: int
    partitions: tuple[PartitionInfo, ...]
    outside: tuple[OutsideNode, ...]
    drawing: tuple[tuple[str, str, int, tuple[str, ...]], ...] = ()

    @property
    def delegated_nodes(self) -> int:
        return sum(p.nodes for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {
            "compute_nodes": self.compute_nodes, "delegated_nodes": self.delegated_nodes,
            "delegated_share": round(self.delegated_nodes / self.compute_nodes, 4) if self.compute_nodes else 0.0,
            "delegates": len(self.partitions),
            "partitions": [{
                "index": p.index, "backend": p.backend, "nodes": p.nodes, "operators": dict(p.operators),
                "backend_nodes": dict(p.backend_nodes), "blob_bytes": p.blob_bytes,
                "named_data_bytes": p.named_data_bytes, "inputs": p.inputs, "outputs": p.outputs,
            } for p in self.partitions],
            "outside": [{"node": o.node, "operator": o.operator, "reason": f"{o.operator}: {o.reason}",
                         "source": o.source} for o in self.outside],
        }


@dataclass(frozen=True)
class PartitionReport:
    """The backends asked for, in order, and each method's partitions."""

    backends: tuple[str, ...]
    methods: tuple[MethodPartitions, ...]

    def to_json(self) -> dict[str, Any]:
        return {"backends": list(self.backends), "methods": {m.method: m.to_json() for m in self.methods}}
