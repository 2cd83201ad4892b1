"""What a quantized method reports: schemes per module, per-layer SNR, outputs, weight bytes.

Numbers are plain JSON: SNRs in dB rounded to 0.01, `null` where a value is exact (infinite
SNR). Weight bytes count the constants the graph reads (weights, biases, scales, zero points).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.fx import GraphModule, Node

from etbuild.quantize.accuracy import Comparison, Layer
from etbuild.quantize.flow import Plan
from etbuild.quantize.metrics import db, float_columns, snr_db, top1_agreement
from etbuild.quantize.modules import module_path
from etbuild.quantize.quantizer import LAYER_OPS

_REPORTED_OPS = LAYER_OPS | {torch.ops.aten.embedding.default}


def constant_bytes(gm: GraphModule) -> int:
    """Bytes of the tensors the graph reads (through get_attr nodes that something uses: the int4
    rewrite leaves the float weight's get_attr behind, unused, until re-export drops it)."""
    tensors = {**dict(gm.named_parameters()), **dict(gm.named_buffers())}
    used = {str(n.target) for n in gm.graph.nodes if n.op == "get_attr" and n.users}
    return sum(t.numel() * t.element_size() for name, t in tensors.items() if name in used)


def module_schemes(nodes: Iterable[Node], plan: Plan) -> dict[str, str]:
    """Module path → the scheme of its layers (schemes joined by ', ' when they differ)."""
    found: dict[str, set[str]] = {}
    for node in nodes:
        if node.op == "call_function" and node.target in _REPORTED_OPS:
            found.setdefault(module_path(node) or "<root>", set()).add(plan.scheme_of(node))
    return {path: ", ".join(sorted(schemes)) for path, schemes in sorted(found.items())}


def layer_record(layer: Layer, scheme: str) -> dict[str, Any]:
    return {"node": layer.node, "op": layer.op, "module": layer.module or "<root>", "scheme": scheme,
            "snr_db": db(layer.snr_db), "own_snr_db": db(layer.own_snr_db)}


def output_records(comparison: Comparison) -> list[dict[str, Any]]:
    """Per float output: SNR and top-1 agreement against the float graph over every sample."""
    return [{"snr_db": db(snr_db(ref, test)), "top1_agreement": top1_agreement(ref, test)}
            for ref, test in float_columns(comparison.reference, comparison.quantized)]
