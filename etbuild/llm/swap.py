"""A converted language model with chosen quantized layers run float, without quantizing again.

A quantized layer of a converted graph reads its weight through a dequantize op of int8/int4 constants
(`dequantize_per_channel_group`, `dequantize_per_channel`) and, for linears with quantized activations,
its input through a quantize → dequantize chain. Keeping the layer float is the same graph with the
layer reading the float weight and the chain's float input. Under a dynamic or weight-only scheme
that is exactly what converting again with the layer in `Plan.keep_float` computes: the other layers'
quantization does not depend on it (per-token and dynamic ranges are chosen at run time; GPTQ compensates
each int4 linear on the float model's calibration activations). Under `int8-static` the layer's output
quantization stays, so there it is an estimate; the search converts its final choice again and measures it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node

from etbuild.quantize.fallback.precision import FLOAT, INT4, INT8, weight_bytes

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
WEIGHT_ARG = {aten.linear.default: 1, aten.embedding.default: 0}
"""The weight's argument index of each op a layer may be."""
_WEIGHT_DEQUANTIZE = {qd.dequantize_per_channel_group.default: INT4, qd.dequantize_per_channel.default: INT8,
                      qd.dequantize_per_tensor.default: INT8}
_FLOAT_PREFIX = "_etbuild_float_"


@dataclass(frozen=True)
class Layer:
    """A quantized layer of a converted graph: its node, its precision (int4, int8) and float weight."""

    node: str
    precision: str
    weight: torch.Tensor

    def bytes_added(self, per_channel: bool, group_size: int) -> int:
        """The weight bytes keeping it float adds (float against its stored precision)."""
        stored = weight_bytes(self.weight, self.precision, per_channel, group_size)
        return weight_bytes(self.weight, FLOAT, per_channel, group_size) - stored


def quantized_layers(converted: GraphModule, captured: GraphModule) -> list[Layer]:
    """The linears and embeddings of `converted` whose weight is dequantized from quantized constants,
    in graph order, with their float weights from `captured` (the same graph before quantization)."""
    originals = {n.name: n for n in captured.graph.nodes}
    layers = []
    for node in converted.graph.nodes:
        index = WEIGHT_ARG.get(node.target) if node.op == "call_function" else None
        weight = node.args[index] if index is not None and len(node.args) > index else None
        if not isinstance(weight, Node) or weight.target not in _WEIGHT_DEQUANTIZE or node.name not in originals:
            continue
        source = originals[node.name].args[index]
        if isinstance(source, Node) and source.op == "get_attr":
            layers.append(Layer(node.name, _WEIGHT_DEQUANTIZE[weight.target], _attr(captured, str(source.target))))
    return layers


@contextlib.contextmanager
def swappable(converted: GraphModule, layers: Sequence[Layer]) -> Iterator[Swapper]:
    """Meanwhile, `converted` can run chosen layers float (`Swapper.keep`); afterwards it is as it was."""
    swapper = Swapper(converted, layers)
    try:
        yield swapper
    finally:
        swapper.undo()


class Swapper:
    """Switches layers of a converted graph between their quantized and float forms."""

    def __init__(self, gm: GraphModule, layers: Sequence[Layer]) -> None:
        self.gm, self.nodes = gm, {n.name: n for n in gm.graph.nodes}
        self.quantized = {layer.node: self.nodes[layer.node].args for layer in layers}
        self.floats = {}
        for i, layer in enumerate(layers):
            name = f"{_FLOAT_PREFIX}{i}"
            gm.register_buffer(name, layer.weight)
            node = self.nodes[layer.node]
            with gm.graph.inserting_before(node):
                attr = gm.graph.get_attr(name)
            index = WEIGHT_ARG[node.target]
            args = list(node.args)
            args[index] = attr
            if index == 1:
                args[0] = _float_input(args[0])
            self.floats[layer.node] = tuple(args)

    def keep(self, names: frozenset[str] | set[str]) -> None:
        """Run the layers `names` float and the others quantized."""
        for node, quantized in self.quantized.items():
            self.nodes[node].args = self.floats[node] if node in names else quantized
        self.gm.recompile()

    def undo(self) -> None:
        """The graph as converted: every layer quantized, the float weights removed."""
        self.keep(set())
        for node in [n for n in self.gm.graph.nodes if n.op == "get_attr" and str(n.target).startswith(_FLOAT_PREFIX)]:
            delattr(self.gm, str(node.target))
            self.gm.graph.erase_node(node)
        self.gm.recompile()


def _float_input(value: Node | object) -> Node | object:
    """The float value a quantize → dequantize chain (of `quantized_decomposed` ops) starts from."""
    while isinstance(value, Node) and value.op == "call_function" and getattr(
            value.target, "namespace", None) == "quantized_decomposed" and value.args:
        value = value.args[0]
    return value


def _attr(gm: GraphModule, target: str) -> torch.Tensor:
    owner = gm
    for part in target.split("."):
        owner = getattr(owner, part)
    return owner.detach().clone()
