"""Elementwise operators: binary (numpy broadcasting), unary, clamps (fused into their producer) and softmax.

They work in whatever layout their main input is held: a binary op brings its other operand
into that layout (a constant is permuted at build time), a unary op keeps it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.emitter import Emitter
from etbuild.backends.xnnpack.aot.ops.base import Checker, arg, aten, normalize_dim, rule, shape_of
from etbuild.backends.xnnpack.aot.quant import per_tensor, result_quant, static
from etbuild.backends.xnnpack.format import graph as g

BINARY = {
    aten.add.Tensor: "Add", aten.sub.Tensor: "Subtract", aten.mul.Tensor: "Multiply", aten.div.Tensor: "Div",
    aten.maximum.default: "Maximum", aten.minimum.default: "Minimum",
    aten.add.Scalar: "Add", aten.sub.Scalar: "Subtract", aten.mul.Scalar: "Multiply", aten.div.Scalar: "Div",
}
QUANTIZED_BINARY = ("Add", "Subtract", "Multiply")  # XNNPACK runs these on qint8 values
UNARY = {
    aten.sigmoid.default: "Sigmoid", aten.tanh.default: "Tanh", aten.exp.default: "Exp", aten.log.default: "Log",
    aten.neg.default: "Negate", aten.abs.default: "Abs", aten.sqrt.default: "SquareRoot",
    aten.rsqrt.default: "ReciprocalSquareRoot", aten.floor.default: "Floor", aten.ceil.default: "Ceiling",
    aten.sin.default: "Sin", aten.cos.default: "Cos", aten.hardswish.default: "Hardswish",
}


def _scalar(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_binary(node: Node, c: Checker) -> str | None:
    a, b = node.args[0], node.args[1]
    if not isinstance(a, Node) and not isinstance(b, Node):
        return "no tensor operand"
    alpha = arg(node, 2, "alpha", 1)
    if alpha != 1 and not (_scalar(b) or c.is_constant(b)):
        return f"alpha={alpha} with an operand computed at run time"
    if node.kwargs.get("rounding_mode") is not None:
        return f"rounding_mode={node.kwargs['rounding_mode']!r}"
    return None


def _operand(e: Emitter, x: Any, alpha: float, rank: int, perm: lay.Perm) -> int:
    """The id of a binary operand in layout `perm` of the output's rank (dims of size 1 where it broadcasts)."""
    if _scalar(x):
        return e.b.constant(np.array([float(x) * alpha], np.float32))
    shape = e.shape(x)
    full = (1,) * (rank - len(shape)) + shape
    if e.is_constant(x) and x not in e.env:
        t = (e.constant(x).detach().to(torch.float32) * alpha).reshape(full).permute(perm).contiguous()
        return e.b.constant(t.numpy()) if t.numel() != 1 else e.b.constant(t.reshape(1).numpy())
    lead = rank - len(shape)
    own = tuple(p - lead for p in perm if p >= lead)
    return e.get(x, own, lay.permuted(full, perm))


def _lead(e: Emitter, node: Node, operands: list[Any]) -> Node | None:
    """The operand computed at run time with the output's shape, whose layout the op keeps."""
    out = e.shape(node)
    for x in operands:
        if isinstance(x, Node) and not e.is_constant(x) and e.shape(x) == out:
            return x
    return None


def _fast(e: Emitter, lead: Node, other: Any) -> int | None:
    """The other operand's id when both can be read as they are held (same layout and dims, or a scalar)."""
    if _scalar(other) or (isinstance(other, Node) and math.prod(e.shape(other)) == 1 and e.is_constant(other)):
        value = float(other) if _scalar(other) else float(e.constant(other).reshape(()))
        return e.b.constant(np.array([value], np.float32))
    h = e.held(lead)
    shape = e.shape(lead)
    if isinstance(other, Node) and other in e.env and e.shape(other) == shape:
        o = e.held(other)
        if lay.same_bytes(o.perm, h.perm, shape) and _lined_up(h.dims, o.dims, shape):
            return o.id
    return None


def _lined_up(a: tuple[int, ...], b: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether values held with dims a and b meet element for element (broadcasting only over dims of size 1)."""
    try:
        broadcast = np.broadcast_shapes(a, b)
    except ValueError:  # held as different splits of the same elements
        return False
    return math.prod(broadcast) == math.prod(shape)


def emit_binary(node: Node, e: Emitter) -> None:
    kind = BINARY[node.target]
    a, b = node.args[0], node.args[1]
    alpha = float(arg(node, 2, "alpha", 1))
    if kind in QUANTIZED_BINARY and alpha == 1 and _quantized(e, node, kind, a, b):
        return
    lead = _lead(e, node, [a, b])
    if lead is not None and alpha == 1:
        other = b if lead is a else a
        fast = _fast(e, lead, other)
        if fast is not None:
            h = e.held(lead)
            ids = (h.id, fast) if lead is a else (fast, h.id)
            dims = np.broadcast_shapes(e.b.dims(ids[0]), e.b.dims(ids[1]))
            e.put(node, e.b.binary(kind, *ids, dims), h.perm)
            return
    rank = len(e.shape(node))
    perm = e.held(lead).perm if lead is not None else lay.identity(rank)
    ids = _operand(e, a, 1.0, rank, perm), _operand(e, b, alpha, rank, perm)
    dims = np.broadcast_shapes(e.b.dims(ids[0]), e.b.dims(ids[1]))
    e.put(node, e.b.binary(kind, *ids, dims), perm)


rule(*BINARY, check=_check_binary)(emit_binary)


def _quantized(e: Emitter, node: Node, kind: str, a: Any, b: Any) -> bool:
    """Emit the int8 node if both operands are int8 values of the output's shape and the result is
    quantized; False when they are not."""
    out_quant = result_quant(node)
    out_shape = e.shape(node)
    operands = [x for x in (a, b) if isinstance(x, Node) and x in e.env and e.shape(x) == out_shape]
    if out_quant is None or len(operands) != 2 or any(static(e.raw(x)) is None for x in operands):
        return False
    perm = e.raw(a).perm
    ids = [e.quantized(x, perm) for x in (a, b)]
    quant = per_tensor(out_quant)
    e.put(node, e.b.binary(kind, *ids, e.b.dims(ids[0]), datatype=g.XNNDatatype.QINT8, quant=quant), perm,
          out_quant)
    return True


def with_constant(e: Emitter, kind: str, xid: int, perm: lay.Perm, shape: tuple[int, ...], t: torch.Tensor) -> int:
    """`x kind t` for value xid holding a tensor of `shape` in layout `perm`, t a constant that broadcasts to it."""
    full = (1,) * (len(shape) - t.dim()) + tuple(t.shape)
    constant = t.detach().to(torch.float32).reshape(full).permute(perm).contiguous()
    return e.b.binary(kind, xid, e.b.constant(constant.numpy()), lay.permuted(shape, perm))


@rule(*UNARY)
def emit_unary(node: Node, e: Emitter) -> None:
    h = e.held(node.args[0])
    e.put(node, e.b.unary(UNARY[node.target], h.id, h.dims), h.perm)


def _bounds(node: Node) -> tuple[float, float]:
    """The [low, high] a relu, hardtanh or clamp keeps its input in."""
    if node.target is aten.relu.default:
        return 0.0, math.inf
    if node.target is aten.hardtanh.default:
        return float(arg(node, 1, "min_val", -1.0)), float(arg(node, 2, "max_val", 1.0))
    low, high = arg(node, 1, "min"), arg(node, 2, "max")
    return (-math.inf if low is None else float(low)), (math.inf if high is None else float(high))


def _check_clamp(node: Node, c: Checker) -> str | None:
    low, high = arg(node, 1, "min"), arg(node, 2, "max")
    if any(v is not None and not _scalar(v) for v in (low, high)):
        return "tensor bounds"
    return None


@rule(aten.relu.default, aten.hardtanh.default, aten.clamp.default, check=_check_clamp)
def emit_clamp(node: Node, e: Emitter) -> None:
    low, high = _bounds(node)
    if e.fuse_clamp(node, low, high):
        return
    quant = e.kept_quant(node)
    h = e.raw(node.args[0]) if quant is not None else e.held(node.args[0])
    datatype = g.XNNDatatype.FP32 if quant is None else g.XNNDatatype.QINT8
    out = e.b.unary("Clamp", h.id, h.dims, (low, high), datatype, None if quant is None else per_tensor(quant))
    e.put(node, out, h.perm, quant)


def _check_gelu(node: Node, c: Checker) -> str | None:
    approximate = node.kwargs.get("approximate", "none")
    return None if approximate in ("none", "tanh") else f"approximate={approximate!r}"


@rule(aten.gelu.default, check=_check_gelu)
def emit_gelu(node: Node, e: Emitter) -> None:
    h = e.held(node.args[0])
    if node.kwargs.get("approximate", "none") == "tanh":
        e.put(node, _tanh_gelu(e, h.id, h.dims), h.perm)
    else:
        e.put(node, e.b.unary("Gelu", h.id, h.dims), h.perm)


GELU_KAPPA = 0.044715
GELU_BETA = math.sqrt(2 / math.pi)


def _tanh_gelu(e: Emitter, x: int, dims: tuple[int, ...]) -> int:
    """GELU's tanh form, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (Gemma's, GPT-2's), which XNNPACK has no
    node for (its Gelu is the erf form), as eight Multiply / Add / Tanh nodes in torch's order of operations."""
    b = e.b

    def scalar(value: float) -> int:
        return b.constant(np.array([value], np.float32))

    cube = b.binary("Multiply", b.binary("Multiply", x, x, dims), x, dims)
    inner = b.binary("Multiply", b.binary("Add", x, b.binary("Multiply", cube, scalar(GELU_KAPPA), dims), dims),
                     scalar(GELU_BETA), dims)
    one_plus = b.binary("Add", b.unary("Tanh", inner, dims), scalar(1.0), dims)
    return b.binary("Multiply", b.binary("Multiply", x, scalar(0.5), dims), one_plus, dims)


def _check_pow(node: Node, c: Checker) -> str | None:
    return None if node.args[1] in (2, 2.0, 0.5) else f"exponent {node.args[1]} (2 and 0.5 are taken)"


@rule(aten.pow.Tensor_Scalar, check=_check_pow)
def emit_pow(node: Node, e: Emitter) -> None:
    h = e.held(node.args[0])
    kind = "Square" if node.args[1] == 2 else "SquareRoot"
    e.put(node, e.b.unary(kind, h.id, h.dims), h.perm)


def _parametric(node: Node, e: Emitter, kind: type, parameter: float) -> None:
    """A one-parameter activation (LeakyReLU's slope, ELU's alpha) in its input's layout."""
    h = e.held(node.args[0])
    out = e.b.tensor(h.dims)
    e.node(kind(parameter, h.id, out, 0), out)
    e.put(node, out, h.perm)


@rule(aten.leaky_relu.default)
def emit_leaky_relu(node: Node, e: Emitter) -> None:
    _parametric(node, e, g.LeakyReLU, float(arg(node, 1, "negative_slope", 0.01)))


def _check_elu(node: Node, c: Checker) -> str | None:
    scale, input_scale = arg(node, 2, "scale", 1), arg(node, 3, "input_scale", 1)
    return None if scale == 1 and input_scale == 1 else f"scale={scale}, input_scale={input_scale}"


@rule(aten.elu.default, check=_check_elu)
def emit_elu(node: Node, e: Emitter) -> None:
    _parametric(node, e, g.ELU, float(arg(node, 1, "alpha", 1.0)))


def _check_softmax(node: Node, c: Checker) -> str | None:
    return "half_to_float" if node.args[2] else None


@rule(aten._softmax.default, check=_check_softmax)
def emit_softmax(node: Node, e: Emitter) -> None:
    x = node.args[0]
    rank = len(shape_of(x))
    dim = normalize_dim(int(node.args[1]), rank)
    held = e.held(x)
    kept = [d for d in held.perm if shape_of(x)[d] != 1]
    perm = held.perm if kept and kept[-1] == dim else lay.moved_last(rank, dim)
    vid = e.rows(x, shape_of(x)[dim], perm)
    e.put(node, e.b.unary("Softmax", vid, e.b.dims(vid)), perm)
