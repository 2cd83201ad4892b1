"""Turns one partition (FX nodes in core ATen) into an XNNPACK graph, node by node.

Each FX value is held by an XNNPACK value in some layout (`layout.Held`): ops that work
channels-last (convolutions, poolings) leave their results in NHWC, ops that do not care
(elementwise) keep their input's layout, and permutes and views are free where the bytes
allow, so transposes and reshapes appear only where a consumer needs torch's order or an
exact shape (`get`), and each is made once per value and layout. The delegate's inputs
arrive and its outputs leave in torch's layout and shape, as the program holds them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.builder import GraphBuilder
from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime.ops.base import CLAMPED
from etbuild.errors import InternalError
from etbuild.lowering.partition import Subgraph


def logical_shape(node: Node) -> tuple[int, ...]:
    """A node's torch shape (static: the partitioner takes no symbolic shapes)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise InternalError(f"node {node.name} holds {type(val).__name__}, not a tensor")
    return tuple(int(s) for s in val.shape)


class Emitter:
    """The state of one partition's translation: the builder and how each FX value is held."""

    def __init__(self, sub: Subgraph) -> None:
        self.b = GraphBuilder()
        self.sub = sub
        self.env: dict[Node, lay.Held] = {}
        self.tuples: dict[Node, list[lay.Held | None]] = {}  # multi-output nodes, read by getitem
        self.made_by: dict[int, Node] = {}  # value id -> the FX node whose emission created it
        self._made: dict[tuple[int, lay.Perm, lay.Shape], int] = {}
        self.inputs = []
        for node in sub.inputs:
            shape = logical_shape(node)
            vid = self.b.tensor(shape)
            self.inputs.append(vid)
            self.env[node] = lay.Held(vid, lay.identity(len(shape)), shape)
        self.handle = 0

    # ------------------------------------------------------------------ reading values

    def shape(self, node: Any) -> tuple[int, ...]:
        return logical_shape(node)

    def is_constant(self, arg: Any) -> bool:
        return isinstance(arg, Node) and arg in self.sub.constants

    def constant(self, arg: Node) -> torch.Tensor:
        return self.sub.constants[arg]

    def held(self, arg: Node) -> lay.Held:
        """How a value is held now (a constant: in torch's layout)."""
        if arg not in self.env:
            if not self.is_constant(arg):
                raise InternalError(f"partition reads {arg.name} before it is computed")
            t = self.constant(arg).detach().to(torch.float32).contiguous()
            vid = self.b.constant(t.numpy())
            self.env[arg] = lay.Held(vid, lay.identity(t.dim()), tuple(t.shape))
        return self.env[arg]

    def get(self, arg: Node, perm: Sequence[int] | None = None, dims: Sequence[int] | None = None) -> int:
        """The id of a value holding `arg` in layout `perm` (default torch's) with `dims`
        (default: its shape so permuted); a transpose and reshapes are added where needed."""
        shape = self.shape(arg)
        perm = lay.identity(len(shape)) if perm is None else tuple(perm)
        dims = lay.permuted(shape, perm) if dims is None else tuple(dims)
        if self.is_constant(arg) and arg not in self.env:
            data = self.constant(arg).detach().to(torch.float32).permute(perm).reshape(dims).contiguous()
            return self.b.constant(data.numpy())
        h = self.held(arg)
        key = (h.id, perm, dims)
        if key not in self._made:
            self._made[key] = self._convert(h, shape, perm, dims)
        return self._made[key]

    def _convert(self, h: lay.Held, shape: tuple[int, ...], perm: lay.Perm, dims: lay.Shape) -> int:
        vid = h.id
        if not lay.same_bytes(h.perm, perm, shape):
            source_dims = lay.permuted(shape, h.perm)
            if h.dims != source_dims:
                vid = self.b.reshape(vid, source_dims)
            between = lay.transpose_between(h.perm, perm)
            vid = self.b.transpose(vid, between, lay.permuted(shape, perm))
        return vid if self.b.dims(vid) == dims else self.b.reshape(vid, dims)

    def rows(self, arg: Node, last: int, perm: Sequence[int] | None = None) -> int:
        """A value holding `arg` in layout `perm` (default torch's) with any dims that end in
        `last` (what FullyConnected and Softmax read: rows of `last` elements)."""
        perm = lay.identity(len(self.shape(arg))) if perm is None else tuple(perm)
        if arg in self.env:
            h = self.env[arg]
            if h.dims and h.dims[-1] == last and lay.same_bytes(h.perm, perm, self.shape(arg)):
                return h.id
        return self.get(arg, perm)

    # ------------------------------------------------------------------ writing values

    def put(self, node: Node, vid: int, perm: Sequence[int] | None = None) -> None:
        """`node`'s value is value `vid`, held in layout `perm` (default torch's)."""
        rank = len(self.shape(node))
        self.env[node] = lay.Held(vid, lay.identity(rank) if perm is None else tuple(perm), self.b.dims(vid))
        self.made_by.setdefault(vid, node)

    def alias(self, node: Node, held: lay.Held) -> None:
        self.env[node] = held

    def node(self, body: g.NodeBody, output: int, min_max: tuple[float, float] | None = None) -> g.XNode:
        return self.b.node(body, output, min_max, self.handle)

    def fuse_clamp(self, node: Node, low: float, high: float) -> bool:
        """Clamp `node`'s only input where its producer writes it (output_min_max), when it can be."""
        source = node.args[0]
        if not isinstance(source, Node) or len(source.users) != 1 or source not in self.env:
            return False
        held = self.env[source]
        producer = self.b.producers.get(held.id)
        if producer is None or type(producer.node).__name__ not in CLAMPED or self.made_by.get(held.id) is not source:
            return False
        if producer.output_min_max is None:
            producer.output_min_max = g.OutputMinMax(low, high)
        else:
            bounds = producer.output_min_max
            bounds.output_min, bounds.output_max = max(bounds.output_min, low), min(bounds.output_max, high)
        self.alias(node, held)
        return True

    # ------------------------------------------------------------------ the graph

    def run(self, emitters: dict[Any, Any]) -> g.XNNGraph:
        for k, node in enumerate(self.sub.nodes):
            self.handle = k + 1
            emitters[node.target](node, self)
        outputs: list[int] = []
        for node in self.sub.outputs:
            vid = self.get(node)
            if not self.b.is_computed(vid) or vid in outputs:
                vid = self.b.copy(vid)
            outputs.append(vid)
        return self.b.finish(self.inputs, outputs)


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def as_float32(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).contiguous().numpy()
