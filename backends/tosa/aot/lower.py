"""One int8 partition → a TOSA 1.0 graph, by walking its calls in graph order (our own walk).

Takes a `Subgraph` whose calls support.py accepted: dequantize → float calls → quantize chains over int8
activations and int8 constant weights. Gives the flatbuffer bytes: the partition's inputs are the block's
inputs and its outputs the block's outputs, in the Subgraph's order (the delegate call's argument order),
int8 and in PyTorch's dim order, as ExecuTorch's runtime copies them in and out byte for byte.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.aot import Subgraph
from etbuild.backends.tosa.aot import compute, matmul, norm, patches, shape, tables
from etbuild.backends.tosa.aot.builder import TosaBuilder
from etbuild.backends.tosa.aot.quant import DQ, WEIGHT_DQ, Q
from etbuild.backends.tosa.aot.values import TORCH, Value, in_layout

aten = torch.ops.aten
Rule = Callable[["Lowering", Node], "Value | None"]

RULES: dict[object, Rule] = {
    Q: compute.quantize, **dict.fromkeys((DQ, *WEIGHT_DQ), compute.dequantize),
    aten.convolution.default: patches.convolution,
    aten.addmm.default: compute.linear, aten.mm.default: compute.linear, aten.linear.default: compute.linear,
    aten.relu.default: compute.clamp, aten.hardtanh.default: compute.clamp, aten.clamp.default: compute.clamp,
    aten.add.Tensor: compute.add, aten.mul.Tensor: matmul.mul, aten.bmm.default: matmul.bmm,
    aten.cat.default: shape.cat, aten.constant_pad_nd.default: shape.pad,
    **dict.fromkeys(tables.TABLE_OPS, tables.table), **dict.fromkeys(tables.SOFTMAX_OPS, tables.softmax),
    aten.max_pool2d_with_indices.default: compute.max_pool, aten.max_pool2d.default: compute.max_pool,
    aten.avg_pool2d.default: compute.avg_pool, aten.mean.dim: norm.any_mean,
    aten.native_layer_norm.default: norm.layer_norm, aten.slice.Tensor: shape.slice_,
    aten.select.int: shape.select,
    **dict.fromkeys((aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
                     aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default, aten.clone.default,
                     aten.alias.default), shape.view),
    aten.permute.default: shape.permute, aten.transpose.int: shape.swap,
    operator.getitem: shape.first_result,
}
"""Every call the walk lowers, by target."""


@dataclass(frozen=True)
class Lowered:
    """A partition's TOSA flatbuffer and how many operators of each kind it holds."""

    tosa: bytes
    operators: Mapping[str, int]


class Lowering:
    """The state of one walk: the builder, the constants, and the value each node has become."""

    def __init__(self, sub: Subgraph) -> None:
        self.b, self.constants = TosaBuilder(), sub.constants
        self.values: dict[Node, Value] = {}
        self.inputs: set[str] = set()
        for node in sub.inputs:
            shape_ = tuple(node.meta["val"].shape)
            name = self.b.input(shape_, np.int8)
            self.inputs.add(name)
            self.values[node] = Value(name, shape_)

    def value(self, node: Node) -> Value:
        return self.values[node]

    def run(self, sub: Subgraph) -> Lowered:
        for node in sub.nodes:
            value = RULES[node.target](self, node)
            if value is not None:
                self.values[node] = value
        for node in sub.outputs:
            value = in_layout(self.b, self.values[node], TORCH)
            tensor = value.tensor
            if tensor in self.inputs:  # an output must be a tensor the graph computes
                tensor = self.b.op("IDENTITY", [tensor], value.stored, np.int8, "IdentityAttribute")
            self.b.output(tensor)
        return Lowered(self.b.serialize(), dict(sorted(self.b.ops.items())))


def lower_subgraph(sub: Subgraph) -> Lowered:
    """The TOSA graph of one partition."""
    return Lowering(sub).run(sub)
