"""Operators that move numbers: views, permutes, slices, splits, concatenation, padding, copies.

Views and permutes emit nothing where the bytes allow (they change how the value is held,
see layout.py); slices, concatenations and paddings work in the layout their input is held
in, their parameters permuted to match.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.builder import is_dynamic
from etbuild.backends.xnnpack.aot.emitter import Emitter
from etbuild.backends.xnnpack.aot.ops.base import Checker, arg, aten, normalize_dim, rule, shape_of, small
from etbuild.backends.xnnpack.aot.quant import VIEWS, per_tensor, result_quant, static
from etbuild.backends.xnnpack.format import graph as g

MAX_CONCAT = 5  # Concatenate5 is XNNPACK's widest


@rule(*VIEWS)
def emit_view(node: Node, e: Emitter) -> None:
    x = node.args[0]
    held, new = e.raw(x), e.shape(node)
    perm = lay.view_layout(held.perm, e.shape(x), new)
    if perm is None:
        held = e.in_torch_order(x)
        perm = lay.identity(len(new))
    e.alias(node, lay.relabel(held, perm))


@rule(aten.permute.default, aten.permute_copy.default)
def emit_permute(node: Node, e: Emitter) -> None:
    held = e.raw(node.args[0])
    dims = [normalize_dim(d, len(held.perm)) for d in node.args[1]]
    e.alias(node, lay.relabel(held, lay.permute_layout(held.perm, dims)))


def _check_same_shape(node: Node, c: Checker) -> str | None:
    return None if shape_of(node) == shape_of(node.args[0]) else "it broadcasts (XNNPACK has no broadcast node)"


@rule(aten.expand.default, aten.expand_copy.default, check=_check_same_shape)
def emit_expand(node: Node, e: Emitter) -> None:
    e.alias(node, e.raw(node.args[0]))


def _check_copy(node: Node, c: Checker) -> str | None:
    val = node.meta.get("val")
    source = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    if isinstance(val, torch.Tensor) and isinstance(source, torch.Tensor) and val.dtype != source.dtype:
        return f"it converts {source.dtype} to {val.dtype}"
    return None


@rule(aten.clone.default, aten.alias.default, aten._to_copy.default, aten.alias_copy.default,
      aten.contiguous.default, check=_check_copy)
def emit_copy(node: Node, e: Emitter) -> None:
    e.alias(node, e.raw(node.args[0]))


@rule(operator.getitem)
def emit_getitem(node: Node, e: Emitter) -> None:
    held = e.tuples[node.args[0]][int(node.args[1])]
    if held is not None:
        e.alias(node, held)


# ---------------------------------------------------------------------------- slices


def _bounds(shape: Sequence[int], dim: int, start: Any, end: Any) -> tuple[int, int]:
    size = shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    start, end = (s + size if s < 0 else s for s in (start, end))
    return max(0, min(start, size)), max(0, min(end, size))


def _slice(e: Emitter, x: Node, dim: int, start: int, length: int) -> lay.Held:
    """x narrowed along dim to [start, start + length), in x's layout (a known x: at build time)."""
    shape = e.shape(x)
    if e.is_constant(x) and x not in e.env:
        t = e.constant(x).narrow(dim, start, length).detach().to(torch.float32).contiguous()
        return lay.Held(e.b.constant(t.numpy()), lay.identity(len(shape)), tuple(t.shape))
    held = e.held(x)
    if start == 0 and length == shape[dim]:
        return held
    at = lay.held_axis(held, shape, dim)
    vid, dims = held.id, list(held.dims)
    if at is None:
        vid, dims = e.get(x, held.perm), list(lay.permuted(shape, held.perm))
        at = held.perm.index(dim)
    offsets = [0] * len(dims)
    offsets[at], dims[at] = start, length
    out = e.b.tensor(dims)
    e.node(g.StaticSlice(len(dims), offsets, _slice_sizes(dims), vid, out, 0), out)
    return lay.Held(out, held.perm, tuple(dims))


def _slice_sizes(dims: Sequence[int]) -> list[int]:
    """A StaticSlice's sizes: 0 for a dynamic (unsliced, offset 0) dim, which XNNPACK's reshape reads as
    the input's whole size at run time (its end offset + size <= 0 counts from the input's end)."""
    return [0 if is_dynamic(d) else int(d) for d in dims]


def dynamic_axis(node: Node, dim: int) -> str | None:
    """Why a slice or concatenation along torch dim `dim` is not taken: its size there is symbolic
    (XNNPACK's static nodes take a dynamic size only on the other dims); None otherwise."""
    for value in [node, *node.all_input_nodes]:
        val = value.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dim() > dim and not isinstance(val.shape[dim], int):
            return f"its dim {dim} ({val.shape[dim]}) is dynamic (XNNPACK slices and concatenates static sizes)"
    return None


def _check_slice(node: Node, c: Checker) -> str | None:
    step = arg(node, 4, "step", 1)
    if step != 1:
        return f"step {step}"
    bounds = [arg(node, 2, "start"), arg(node, 3, "end")]
    if any(b is not None and not isinstance(b, int) for b in bounds):
        return "a start or end computed at run time"
    return dynamic_axis(node, normalize_dim(int(arg(node, 1, "dim", 0)), len(shape_of(node.args[0]))))


@rule(aten.slice.Tensor, aten.slice_copy.Tensor, check=_check_slice)
def emit_slice(node: Node, e: Emitter) -> None:
    x = node.args[0]
    shape = e.shape(x)
    dim = normalize_dim(int(arg(node, 1, "dim", 0)), len(shape))
    start, end = _bounds(shape, dim, arg(node, 2, "start"), arg(node, 3, "end"))
    e.alias(node, _slice(e, x, dim, start, max(0, end - start)))


def _check_select(node: Node, c: Checker) -> str | None:
    return small(node, "select")  # ExecuTorch's partitioner takes no select: its programs copy on one thread


@rule(aten.select.int, aten.select_copy.int, check=_check_select)
def emit_select(node: Node, e: Emitter) -> None:
    x = node.args[0]
    shape = e.shape(x)
    dim = normalize_dim(int(node.args[1]), len(shape))
    index = int(node.args[2]) % shape[dim]
    held = _slice(e, x, dim, index, 1)
    kept = tuple(s if d != dim else 1 for d, s in enumerate(shape))
    perm = lay.view_layout(held.perm, kept, e.shape(node))  # dropping a dim of size 1 is always free
    e.alias(node, lay.relabel(held, perm or lay.identity(len(kept) - 1)))


def _split_sizes(node: Node) -> list[int]:
    shape = shape_of(node.args[0])
    dim = normalize_dim(int(arg(node, 2, "dim", 0)), len(shape))
    if node.target in (aten.split_with_sizes.default, aten.split_with_sizes_copy.default):
        return [int(s) for s in node.args[1]]
    step = int(node.args[1])
    return [min(step, shape[dim] - k) for k in range(0, shape[dim], step)]


def _check_split(node: Node, c: Checker) -> str | None:
    return dynamic_axis(node, normalize_dim(int(arg(node, 2, "dim", 0)), len(shape_of(node.args[0]))))


@rule(aten.split_with_sizes.default, aten.split.Tensor, aten.split_with_sizes_copy.default, aten.split_copy.Tensor,
      check=_check_split)
def emit_split(node: Node, e: Emitter) -> None:
    x = node.args[0]
    dim = normalize_dim(int(arg(node, 2, "dim", 0)), len(e.shape(x)))
    used = {int(u.args[1]) for u in node.users if u.users}
    pieces: list[lay.Held | None] = []
    start = 0
    for k, size in enumerate(_split_sizes(node)):
        pieces.append(_slice(e, x, dim, start, size) if k in used else None)
        start += size
    e.tuples[node] = pieces


# ---------------------------------------------------------------------------- cat, pad


def _check_cat(node: Node, c: Checker) -> str | None:
    if len(node.args[0]) < 1:
        return "no inputs"
    return dynamic_axis(node, normalize_dim(int(arg(node, 1, "dim", 0)), len(shape_of(node))))


@rule(aten.cat.default, check=_check_cat)
def emit_cat(node: Node, e: Emitter) -> None:
    parts = [t for t in node.args[0] if np.prod(shape_of(t)) > 0]
    rank = len(e.shape(node))
    dim = normalize_dim(int(arg(node, 1, "dim", 0)), rank)
    live = [t for t in parts if not e.is_constant(t)]
    perm = e.raw(live[0]).perm if live else lay.identity(rank)
    quant = _common_quant(e, node, parts)
    ids = [e.get(t, perm) if quant is None else e.quantized(t, perm) for t in parts]
    axis = perm.index(dim)
    while len(ids) > 1:
        group, ids = ids[:MAX_CONCAT], ids[MAX_CONCAT:]
        ids.insert(0, _concat(e, group, axis, quant))
    e.put(node, ids[0], perm, quant)


def _common_quant(e: Emitter, node: Node, parts: list[Node]) -> lay.Quant | None:
    """The int8 parameters every input and the result share (the quantizer makes them one), so the
    concatenation moves int8 values; None when they differ or any is float."""
    if not parts or any(e.is_constant(t) for t in parts):
        return None
    quants = {static(e.raw(t)) for t in parts}
    quant = quants.pop() if len(quants) == 1 else None
    return quant if quant is not None and result_quant(node) == quant else None


def _concat(e: Emitter, ids: list[int], axis: int, quant: lay.Quant | None = None) -> int:
    dims = list(e.b.dims(ids[0]))
    dims[axis] = sum(e.b.dims(i)[axis] for i in ids)
    out = e.b.tensor(dims) if quant is None else e.b.tensor(dims, g.XNNDatatype.QINT8, per_tensor(quant))
    slots = [*ids, 0, 0, 0, 0][:MAX_CONCAT]
    body = g.MEMBER_TYPES[f"Concatenate{len(ids)}"](
        axis=axis, input1_id=slots[0], input2_id=slots[1], input3_id=slots[2], input4_id=slots[3],
        output_id=out, flags=0, input5_id=slots[4],
    )
    e.node(body, out)
    return out


def _check_pad(node: Node, c: Checker) -> str | None:
    pads = list(node.args[1])
    return "negative padding (a crop)" if any(p < 0 for p in pads) else None


@rule(aten.constant_pad_nd.default, check=_check_pad)
def emit_pad(node: Node, e: Emitter) -> None:
    x = node.args[0]
    rank = len(e.shape(x))
    pads = list(node.args[1])
    before, after = [0] * rank, [0] * rank
    for k in range(len(pads) // 2):
        before[rank - 1 - k], after[rank - 1 - k] = pads[2 * k], pads[2 * k + 1]
    held = e.held(x)
    vid = e.get(x, held.perm)
    dims = [s + before[d] + after[d] for s, d in zip(lay.permuted(e.shape(x), held.perm), held.perm)]
    out = e.b.tensor(dims)
    value = float(arg(node, 2, "value", 0.0))
    pre, post = list(lay.permuted(before, held.perm)), list(lay.permuted(after, held.perm))
    e.node(g.StaticConstantPad(pre, post, value, vid, out, 0), out)
    e.put(node, out, held.perm)


def _check_full(node: Node, c: Checker) -> str | None:
    return None if isinstance(node.args[1], (int, float)) else "a fill value computed at run time"


@rule(aten.full.default, check=_check_full)
def emit_full(node: Node, e: Emitter) -> None:
    shape = e.shape(node)
    data = np.full(shape, float(node.args[1]), np.float32)
    e.put(node, e.b.constant(data))


FREE = frozenset({
    *VIEWS, aten.permute.default, aten.permute_copy.default, aten.expand.default, aten.expand_copy.default,
    aten.clone.default, aten.alias.default, aten._to_copy.default, aten.alias_copy.default, aten.contiguous.default,
    aten.full.default,
})
"""Operators that only relabel, copy or fill bytes: a partition of nothing else is not worth a delegate call."""
