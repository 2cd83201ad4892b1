"""The quantize/dequantize calls of pt2e-converted graphs: they emit no arithmetic of their own.

A static quantize whose input the operator before it already wrote as int8 with these
parameters (see quant.result_quant) is that value; otherwise it is a Convert fp32 → qint8.
A dequantize is the int8 value it reads, converted to float only where a float operator
reads it (Emitter.held). Dynamic quantization (choose_qparams, then quantize and dequantize
with the chosen parameters) holds the float value itself: a FullyConnected reading it
quantizes its rows at run time (qdint8), as XNNPACK does; per-token parameters (one per row)
are what qdint8 computes, so they go the same way, and int4 group-wise weights become a
blockwise (qbint4) filter. Dequantized weights are known at
build time and read by the operator that uses them (quant.quantized_weight).
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.emitter import Emitter
from etbuild.backends.xnnpack.aot.ops.base import Checker, arg, rule
from etbuild.backends.xnnpack.aot.ops.conv import dynamic_input_ok
from etbuild.backends.xnnpack.aot.quant import VIEWS, per_tensor, static
from etbuild.backends.xnnpack.format import graph as g
from etbuild.errors import InternalError

qd = torch.ops.quantized_decomposed
aten = torch.ops.aten
INT8 = (-128, 127)
QUANT_DTYPES = (torch.float32, torch.int8)
DYNAMIC_DTYPES = (torch.float32, torch.int8, torch.int64, torch.float64)
FC_TARGETS = (aten.addmm.default, aten.mm.default)


def _int8_range(node: Node) -> str | None:
    low, high, dtype = node.args[3], node.args[4], node.args[5]
    if dtype != torch.int8 or low < INT8[0] or high > INT8[1]:
        return f"{dtype} in [{low}, {high}] (int8 is taken)"
    out_dtype = arg(node, 6, "out_dtype")
    return None if out_dtype in (None, torch.float32) else f"out_dtype {out_dtype}"


def _check_dequantize(node: Node, c: Checker) -> str | None:
    source = node.args[0]
    if c.is_constant(source):
        return _int8_range(node)
    if not isinstance(source, Node) or source.target is not qd.quantize_per_tensor.default:
        return "it reads no quantize call"
    if tuple(source.args[1:6]) != tuple(node.args[1:6]):
        return "its parameters differ from the quantize call's"
    return _int8_range(node)


@rule(qd.quantize_per_tensor.default, check=lambda node, c: _int8_range(node), dtypes=QUANT_DTYPES)
def emit_quantize(node: Node, e: Emitter) -> None:
    x = node.args[0]
    quant = lay.Quant(float(node.args[1]), int(node.args[2]))
    raw = e.raw(x)
    if static(raw) == quant:
        e.alias(node, raw)
        return
    held = e.held(x)
    out = e.b.unary("Convert", held.id, held.dims, datatype=g.XNNDatatype.QINT8, quant=per_tensor(quant))
    e.put(node, out, held.perm, quant)


@rule(qd.dequantize_per_tensor.default, check=_check_dequantize, dtypes=QUANT_DTYPES)
def emit_dequantize(node: Node, e: Emitter) -> None:
    e.alias(node, e.raw(node.args[0]))


@rule(qd.dequantize_per_channel.default, qd.dequantize_per_channel_group.default,
      check=lambda node, c: None if c.is_constant(node.args[0]) else "its input is computed at run time",
      dtypes=(torch.float32, torch.int8, torch.int64, torch.bfloat16))
def emit_weight_dequantize(node: Node, e: Emitter) -> None:
    raise InternalError(f"{node.name} is known at build time: read where it is used, never emitted")


# ---------------------------------------------------------------------------- dynamic


def _dynamic_users(node: Node) -> bool:
    """Whether every reader of a dynamic dequantize is a matrix product taking it as its input
    (through views, which keep it quantized), or a plain convolution taking it as its input."""
    for user in node.users:
        if user.target in VIEWS:
            if not _dynamic_users(user):
                return False
        elif user.target is aten.convolution.default:
            if user.args[0] is not node or not dynamic_input_ok(user):
                return False
        elif user.target not in FC_TARGETS or user.args[1 if user.target is aten.addmm.default else 0] is not node:
            return False
    return True


CHOSEN = {
    qd.choose_qparams.tensor: (qd.quantize_per_tensor.tensor, qd.dequantize_per_tensor.tensor, 4),
    qd.choose_qparams_per_token_asymmetric.default: (qd.quantize_per_token.default, qd.dequantize_per_token.default, 1),
}
"""choose-parameters call -> (the quantize and dequantize reading its parameters, its dtype argument).
Per tensor or per token, XNNPACK quantizes the rows it reads at run time (qdint8, per row)."""
DYNAMIC_QUANTIZE = {quantize: choose for choose, (quantize, _, _) in CHOSEN.items()}
DYNAMIC_DEQUANTIZE = tuple(dequantize for _, dequantize, _ in CHOSEN.values())


def _check_choose(node: Node, c: Checker) -> str | None:
    quantize, dequantize, dtype_arg = CHOSEN[node.target]
    items = [u for u in node.users if u.target is operator.getitem]
    readers = [r for item in items for r in item.users] + [u for u in node.users if u not in items]
    for r in readers:
        if r.target is quantize:
            why = _check_dynamic_quantize(r, c)
            if why is not None:
                return f"the quantize reading its parameters is not taken ({why})"
        elif r.target is not dequantize:
            return "its parameters are read by more than a quantize and a dequantize"
    return None if node.args[dtype_arg] == torch.int8 else f"dtype {node.args[dtype_arg]}"


@rule(*CHOSEN, check=_check_choose, dtypes=DYNAMIC_DTYPES)
def emit_choose(node: Node, e: Emitter) -> None:
    e.tuples[node] = [None, None]


def _check_dynamic_quantize(node: Node, c: Checker) -> str | None:
    scale = node.args[1]
    chosen = isinstance(scale, Node) and scale.target is operator.getitem and isinstance(scale.args[0], Node)
    choose = DYNAMIC_QUANTIZE[node.target]
    if not chosen or scale.args[0].target is not choose or scale.args[0].args[0] is not node.args[0]:
        return "its parameters are not chosen from its input at run time"
    if any(u.target not in DYNAMIC_DEQUANTIZE or not _dynamic_users(u) for u in node.users):
        return "its dequantized values are read by more than matrix products and plain convolutions"
    return _int8_range(node)


@rule(*DYNAMIC_QUANTIZE, check=_check_dynamic_quantize, dtypes=DYNAMIC_DTYPES)
def emit_dynamic_quantize(node: Node, e: Emitter) -> None:
    held = e.held(node.args[0])
    e.alias(node, lay.Held(held.id, held.perm, held.dims, lay.Quant(None)))


def _check_dynamic_dequantize(node: Node, c: Checker) -> str | None:
    """Taken only with the dynamic quantize it reads: alone, its int8 input would enter the
    partition with parameters chosen outside it, which no XNNPACK value can carry."""
    source = node.args[0]
    if not isinstance(source, Node) or source.target not in DYNAMIC_QUANTIZE:
        return "it reads no dynamic quantize call"
    why = _check_dynamic_quantize(source, c)
    return _int8_range(node) if why is None else f"the quantize it reads is not taken ({why})"


@rule(*DYNAMIC_DEQUANTIZE, check=_check_dynamic_dequantize, dtypes=DYNAMIC_DTYPES)
def emit_dynamic_dequantize(node: Node, e: Emitter) -> None:
    e.alias(node, e.raw(node.args[0]))
