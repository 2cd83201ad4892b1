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

from etbuild.backends.aot import Subgraph
from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.builder import GraphBuilder
from etbuild.backends.xnnpack.aot.known import Known
from etbuild.backends.xnnpack.aot.quant import VIEWS, per_tensor, result_quant
from etbuild.backends.xnnpack.aot.shapes import sizes
from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.nodes import CLAMPED
from etbuild.errors import InternalError


def logical_shape(node: Node) -> tuple[int, ...]:
    """A node's torch shape (a symbolic size as a DynamicSize at its upper bound)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise InternalError(f"node {node.name} holds {type(val).__name__}, not a tensor")
    return sizes(val.shape)


class Emitter:
    """The state of one partition's translation: the builder and how each FX value is held."""

    def __init__(self, sub: Subgraph) -> None:
        self.b = GraphBuilder()
        self.sub = sub
        self.known = Known(sub.constants)
        self.env: dict[Node, lay.Held] = {}
        self.tuples: dict[Node, list[lay.Held | None]] = {}  # multi-output nodes, read by getitem
        self.made_by: dict[int, Node] = {}  # value id -> the FX node whose emission created it
        self._made: dict[tuple[int, lay.Perm, lay.Shape], int] = {}  # (value, layout, dims) -> its conversion
        self._floats: dict[int, int] = {}  # int8 value -> its float conversion
        self._dynamic: dict[tuple[int, int], int] = {}  # (float value, non-batch dims) -> its qdint8 conversion
        self.inputs = []
        for node in sub.inputs:
            shape = logical_shape(node)
            quant = input_quant(node, sub)
            vid = self.b.tensor(shape) if quant is None or quant.scale is None else self.b.tensor(
                shape, g.XNNDatatype.QINT8, per_tensor(quant))
            self.inputs.append(vid)
            self.env[node] = lay.Held(vid, lay.identity(len(shape)), shape, quant)
        self.fused: dict[int, list[int]] = {}  # id of an XNode -> handles of the calls fused into it

    # ------------------------------------------------------------------ reading values

    def shape(self, node: Any) -> tuple[int, ...]:
        return logical_shape(node)

    def dtype(self, node: Node) -> torch.dtype:
        return node.meta["val"].dtype  # type: ignore[no-any-return]

    def is_constant(self, arg: Any) -> bool:
        return arg in self.known

    def constant(self, arg: Node) -> torch.Tensor:
        return self.known.value(arg)

    def raw(self, arg: Node) -> lay.Held:
        """How a value is held now, quantized or not (a constant: as a float value in torch's layout)."""
        if arg not in self.env:
            if not self.is_constant(arg):
                raise InternalError(f"partition reads {arg.name} before it is computed")
            t = self.constant(arg).detach().to(torch.float32).contiguous()
            vid = self.b.constant(t.numpy())
            self.env[arg] = lay.Held(vid, lay.identity(t.dim()), tuple(t.shape))
        return self.env[arg]

    def held(self, arg: Node) -> lay.Held:
        """How a value is held as a float value (an int8 one converted back once, where it is read as float)."""
        h = self.raw(arg)
        if h.quant is None or h.quant.scale is None:  # float, or dynamic: the float value itself
            return lay.Held(h.id, h.perm, h.dims)
        if h.id not in self._floats:
            self._floats[h.id] = self.b.unary("Convert", h.id, h.dims)
        return lay.Held(self._floats[h.id], h.perm, h.dims)

    def get(self, arg: Node, perm: Sequence[int] | None = None, dims: Sequence[int] | None = None) -> int:
        """The id of a float value holding `arg` in layout `perm` (default torch's) with `dims`
        (default: its shape so permuted); a transpose and reshapes are added where needed."""
        shape = self.shape(arg)
        perm = lay.identity(len(shape)) if perm is None else tuple(perm)
        dims = lay.permuted(shape, perm) if dims is None else tuple(dims)
        if self.is_constant(arg) and arg not in self.env:
            data = self.constant(arg).detach().to(torch.float32).permute(perm).reshape(dims).contiguous()
            return self.b.constant(data.numpy())
        return self._laid_out(self.held(arg), shape, perm, dims)

    def quantized(self, arg: Node, perm: Sequence[int] | None = None, dims: Sequence[int] | None = None) -> int:
        """The id of the int8 value holding `arg` (statically quantized) in layout `perm` with `dims`."""
        shape = self.shape(arg)
        perm = lay.identity(len(shape)) if perm is None else tuple(perm)
        dims = lay.permuted(shape, perm) if dims is None else tuple(dims)
        return self._laid_out(self.raw(arg), shape, perm, dims)

    def kept_quant(self, node: Node, result: Node | None = None) -> lay.Quant | None:
        """The quantization of `node`'s first input when its result (`result`, default the node) is
        quantized alike (a clamp or a max pooling between a dequantize and a quantize with one set
        of parameters): the node then runs on the int8 values."""
        raw = self.raw(node.args[0])
        quant = raw.quant if raw.quant is not None and raw.quant.scale is not None else None
        return quant if quant is not None and result_quant(result or node) == quant else None

    def in_torch_order(self, arg: Node) -> lay.Held:
        """`arg` held in torch's layout, quantized as it is now (a transpose if it is not)."""
        h = self.raw(arg)
        rank = len(self.shape(arg))
        vid = self.quantized(arg) if h.quant is not None and h.quant.scale is not None else self.get(arg)
        return lay.Held(vid, lay.identity(rank), self.b.dims(vid), h.quant)

    def _laid_out(self, h: lay.Held, shape: tuple[int, ...], perm: lay.Perm, dims: lay.Shape) -> int:
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

    def rows(self, arg: Node, last: int, perm: Sequence[int] | None = None, quantized: bool = False) -> int:
        """A value holding `arg` in layout `perm` (default torch's) with any dims that end in
        `last` (what FullyConnected and Softmax read: rows of `last` elements); the int8 value
        of a statically quantized one with `quantized`."""
        perm = lay.identity(len(self.shape(arg))) if perm is None else tuple(perm)
        if arg in self.env:
            h = self.raw(arg) if quantized else self.held(arg)
            if h.dims and h.dims[-1] == last and lay.same_bytes(h.perm, perm, self.shape(arg)):
                return h.id
        return self.quantized(arg, perm) if quantized else self.get(arg, perm)

    def dynamic_rows(self, arg: Node, last: int) -> int:
        """A value of `arg`'s rows of `last` elements quantized per row at run time (qdint8)."""
        return self.dynamic(self.rows(arg, last), 1)

    def dynamic(self, vid: int, nonbatch_dims: int) -> int:
        """Float value `vid` quantized at run time (qdint8), each slice of its last
        `nonbatch_dims` dims on its own parameters."""
        if (vid, nonbatch_dims) not in self._dynamic:
            self._dynamic[vid, nonbatch_dims] = self.b.unary(
                "Convert", vid, self.b.dims(vid), datatype=g.XNNDatatype.QDINT8,
                quant=g.PerTokenDynamicQuant(num_nonbatch_dims=nonbatch_dims))
        return self._dynamic[vid, nonbatch_dims]

    # ------------------------------------------------------------------ writing values

    def put(self, node: Node, vid: int, perm: Sequence[int] | None = None, quant: lay.Quant | None = None) -> None:
        """`node`'s value is value `vid`, held in layout `perm` (default torch's), quantized by `quant`."""
        rank = len(self.shape(node))
        perm = lay.identity(rank) if perm is None else tuple(perm)
        self.env[node] = lay.Held(vid, perm, self.b.dims(vid), quant)
        self.made_by.setdefault(vid, node)

    def alias(self, node: Node, held: lay.Held) -> None:
        self.env[node] = held

    def node(self, body: g.NodeBody, output: int, min_max: tuple[float, float] | None = None) -> g.XNode:
        return self.b.node(body, output, min_max)

    def fuse_clamp(self, node: Node, low: float, high: float) -> bool:
        """Clamp `node`'s only input where its producer writes it (output_min_max), when it can be."""
        source = node.args[0]
        if not isinstance(source, Node) or len(source.users) != 1 or source not in self.env:
            return False
        held = self.raw(source)
        producer = self.b.producers.get(held.id)
        if producer is None or type(producer.node).__name__ not in CLAMPED or self.made_by.get(held.id) is not source:
            return False
        self.fused.setdefault(id(producer), []).append(self.b.handle)
        if producer.output_min_max is None:
            producer.output_min_max = g.OutputMinMax(low, high)
        else:
            bounds = producer.output_min_max
            bounds.output_min, bounds.output_max = max(bounds.output_min, low), min(bounds.output_max, high)
        self.alias(node, held)
        return True

    # ------------------------------------------------------------------ the graph

    def run(self, emitters: dict[Any, Any]) -> g.XNNGraph:
        handles = {node: k + 1 for k, node in enumerate(self.sub.nodes)}
        for node in self.sub.nodes:
            self.b.handle = handles[node]
            if node not in self.known:  # known values become constants where they are read
                emitters[node.target](node, self)
        outputs: list[int] = []
        for node in self.sub.outputs:  # conversions to torch's layout lower the output's call
            self.b.handle = handles.get(node, 0)
            vid = self.quantized(node) if self.dtype(node) == torch.int8 else self.get(node)
            if not self.b.is_computed(vid) or vid in outputs:
                vid = self.b.copy(vid)
            outputs.append(vid)
        return self.b.finish(self.inputs, outputs)


DYNAMIC_DEQUANTIZE = (torch.ops.quantized_decomposed.dequantize_per_tensor.tensor,
                      torch.ops.quantized_decomposed.dequantize_per_token.default)


def input_quant(node: Node, sub: Subgraph) -> lay.Quant | None:
    """How a partition's input is held when it is int8 (an earlier delegate's quantized output,
    handed over as int8 values): the static per-tensor quantization its dequantize calls in this
    partition name. A float input that the graph quantizes at run time (a dynamic dequantize, or a
    view of one, computed outside this partition or by an earlier delegate, whose output keeps the
    target it stood for as `delegated_from`) is held as dynamic: a matrix product or convolution
    here quantizes its rows again, as it would in the partition holding the dequantize (the
    projections reading one attention input, split across delegates by a mask computed outside).
    None for any other float input."""
    if node.meta["val"].dtype != torch.int8:
        source = node
        while isinstance(source, Node) and source.target in VIEWS:
            source = source.args[0]
        target = source.meta.get("delegated_from", source.target) if isinstance(source, Node) else None
        return lay.Quant(None) if target in DYNAMIC_DEQUANTIZE else None
    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    params = {(float(u.args[1]), int(u.args[2])) for u in node.users if u in sub.nodes and u.target is dequantize}
    if len(params) != 1:
        raise InternalError(f"partition input {node.name} is int8 but read by {len(params)} sets of dequantize "
                            "parameters in the partition (expected one)")
    scale, zero_point = params.pop()
    return lay.Quant(scale, zero_point)


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def as_float32(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).contiguous().numpy()
