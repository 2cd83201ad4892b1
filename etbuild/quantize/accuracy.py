"""How much a quantized graph loses against the float one: output gates and per-layer SNR.

A *layer* is a quantized op of `LAYER_OPS` (linear, conv, matmul, add, …) in the converted
graph, with its module path. Its SNR is that of its output as the next op sees it (after its
output's quantize → dequantize, or the fused activation's) against the float graph's value of
the same node; its *own SNR* counts only the noise it adds: the SNR it would have if its inputs (before
they were quantized) were exact, −10·log10(relative noise out − relative noise in), so it
counts the input, weight and output quantization the layer brings. The float graph is the
captured graph after the same conv/BatchNorm folding, so node names match.

SNR as in `metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import GraphModule, Interpreter, Node
from torch.utils._pytree import tree_flatten

from etbuild.quantize.metrics import Energy, from_relative_noise
from etbuild.quantize.modules import module_path
from etbuild.quantize.quantizer import FUSED_ACTIVATIONS, LAYER_OPS

qd = torch.ops.quantized_decomposed
DEQUANTIZE = frozenset({
    qd.dequantize_per_tensor.default, qd.dequantize_per_tensor.tensor, qd.dequantize_per_channel.default,
    qd.dequantize_per_token.default, qd.dequantize_per_channel_group.default,
})
QUANTIZE = frozenset({
    qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor, qd.quantize_per_channel.default,
    qd.quantize_per_token.default,
})


@dataclass(frozen=True)
class Layer:
    """A quantized op: its node name, op, module path, output SNR and own SNR (dB) against float."""

    node: str
    op: str
    module: str
    snr_db: float
    own_snr_db: float


@dataclass(frozen=True)
class _Probe:
    node: Node
    sources: tuple[Node, ...]  # the layer's activation inputs before quantization
    end: Node  # the node whose float value the layer's output stands for
    seen: Node  # the value the next op sees (end, or the dequantize after it)


def _before_quantization(arg: Node) -> Node:
    """The value a dequantize node restores (through its quantize), or `arg` itself."""
    if arg.target in DEQUANTIZE and isinstance(arg.args[0], Node) and arg.args[0].target in QUANTIZE:
        source = arg.args[0].args[0]
        return source if isinstance(source, Node) else arg
    return arg


def _seen(end: Node) -> Node:
    users = list(end.users)
    if len(users) == 1 and users[0].target in QUANTIZE:
        dequant = [u for u in users[0].users if u.target in DEQUANTIZE]
        if dequant:
            return dequant[0]
    return end


def _probes(graph: Any) -> list[_Probe]:
    """The quantized layers of a converted graph (those reading a dequantized value)."""
    probes = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in LAYER_OPS:
            continue
        args = [a for a in node.args[:2] if isinstance(a, Node)]
        if not any(a.target in DEQUANTIZE for a in args):
            continue
        activations = args[:1] if node.target in _WEIGHTED_FIRST else args
        users = list(node.users)
        end = users[0] if len(users) == 1 and users[0].target in FUSED_ACTIVATIONS else node
        sources = tuple(_before_quantization(a) for a in activations)
        probes.append(_Probe(node, sources, end, _seen(end)))
    return probes


def _measurable(probes: list[_Probe], float_names: set[str]) -> list[_Probe]:
    """The probes whose output has a float counterpart, each with the sources that have one: a
    value only the converted graph has (the dequantize of a constant that convert folded into
    int8, such as a position table a layer adds) is weight noise, not an input's, and is not compared."""
    kept = []
    for p in probes:
        if p.end.name in float_names:
            kept.append(_Probe(p.node, tuple(s for s in p.sources if s.name in float_names), p.end, p.seen))
    return kept


_WEIGHTED_FIRST = LAYER_OPS - {
    torch.ops.aten.matmul.default, torch.ops.aten.bmm.default, torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor
}


class _Recorder(Interpreter):
    """Runs a graph, keeping the values of the named nodes."""

    def __init__(self, gm: GraphModule, keep: set[str]) -> None:
        super().__init__(gm)
        self.keep = keep
        self.values: dict[str, Any] = {}

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        if n.name in self.keep:
            self.values[n.name] = result
        return result


@dataclass(frozen=True)
class Comparison:
    """The float and quantized outputs on every sample, and the quantized layers."""

    reference: list[list[torch.Tensor]]
    quantized: list[list[torch.Tensor]]
    layers: list[Layer]


def compare(float_gm: GraphModule, quant_gm: GraphModule, samples: Sequence[tuple[Any, ...]]) -> Comparison:
    """Run both graphs on every sample; measure the outputs and each quantized layer."""
    probes = _measurable(_probes(quant_gm.graph), {n.name for n in float_gm.graph.nodes})
    float_keep = {n.name for p in probes for n in (*p.sources, p.end)}
    quant_keep = {n.name for p in probes for n in (*p.sources, p.seen)}
    inputs = {(p.node.name, s.name): Energy() for p in probes for s in p.sources}
    outputs = {p.node.name: Energy() for p in probes}
    reference, quantized = [], []
    with torch.no_grad():
        for sample in samples:
            f, q = _Recorder(float_gm, float_keep), _Recorder(quant_gm, quant_keep)
            reference.append(tree_flatten(f.run(*sample))[0])
            quantized.append(tree_flatten(q.run(*sample))[0])
            for p in probes:
                for source in p.sources:
                    inputs[p.node.name, source.name].add(f.values[source.name], q.values[source.name])
                outputs[p.node.name].add(f.values[p.end.name], q.values[p.seen.name])
    layers = []
    for p in probes:
        noise_in = max((inputs[p.node.name, s.name].relative_noise for s in p.sources), default=0.0)
        out = outputs[p.node.name]
        op = str(p.node.target).removeprefix("aten.")
        own = from_relative_noise(out.relative_noise - noise_in) if not math.isinf(noise_in) else -math.inf
        layers.append(Layer(p.node.name, op, module_path(p.node), out.snr_db, own))
    return Comparison(reference, quantized, layers)
