"""Which calls the XNNPACK backend takes, and why it leaves each other call out.

A call is taken when its operator has a rule (ops/), the recipe's options allow it (not in an
excluded module; a decomposed operator only with `decompose`), its tensors have the dtypes
the rule handles and static shapes of at most six dims, and the rule's own check passes.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from fnmatch import fnmatch
from typing import Any

import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot.known import Known
from etbuild.backends.xnnpack.aot.ops import RULES, Checker, decomposes
from etbuild.backends.xnnpack.aot.ops.base import MAX_RANK, aten, used_items
from etbuild.backends.xnnpack.aot.ops.elementwise import BINARY, UNARY
from etbuild.backends.xnnpack.aot.ops.quant import CHOSEN, DYNAMIC_DEQUANTIZE, DYNAMIC_QUANTIZE, FC_TARGETS
from etbuild.backends.xnnpack.aot.quant import VIEWS
from etbuild.backends.xnnpack.options import XnnpackOptions


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _tensor_reason(node: Node, dtypes: tuple[torch.dtype, ...]) -> str | None:
    """Why a call's tensors (read and written) are not ones XNNPACK takes, or None. A symbolic
    size is taken only by the calls of DYNAMIC, one per tensor (XNNPACK resizes them per call)."""
    tensors = [t for a in node.all_input_nodes for t in _tensors(a.meta.get("val"))]
    result = node.meta.get("val")
    if isinstance(result, (list, tuple)):  # several results: only those read count
        result = [r for k, r in enumerate(result) if k in used_items(node)]
    tensors += _tensors(result)
    for t in tensors:
        if t.dtype not in dtypes:
            return f"{str(t.dtype).removeprefix('torch.')} not supported"
        symbolic = sum(not isinstance(s, int) for s in t.shape)
        if symbolic and node.target not in DYNAMIC:
            return "symbolic (dynamic) shapes not supported"
        if symbolic > 1:
            return f"{symbolic} symbolic sizes in one tensor (XNNPACK infers one)"
        if t.dim() > MAX_RANK:
            return f"{t.dim()} dims (XNNPACK takes at most {MAX_RANK})"
    return None


DYNAMIC = frozenset({
    *BINARY, *UNARY, *VIEWS, *FC_TARGETS, *CHOSEN, *DYNAMIC_QUANTIZE, *DYNAMIC_DEQUANTIZE,
    aten.permute.default, aten.permute_copy.default, aten.clone.default, aten.alias.default,
    aten.alias_copy.default, aten.contiguous.default, aten.pow.Tensor_Scalar, aten.mean.dim, aten.sum.dim_IntList,
    aten.bmm.default, aten._softmax.default, aten.relu.default, aten.hardtanh.default, aten.clamp.default,
    aten.gelu.default, aten.leaky_relu.default, aten.elu.default,
    aten.slice.Tensor, aten.slice_copy.Tensor, aten.cat.default, aten.split.Tensor, aten.split_copy.Tensor,
    aten.split_with_sizes.default, aten.split_with_sizes_copy.default,
})
"""Calls taken with a symbolic (dynamic) size: XNNPACK's reshape propagates it through their nodes,
and the values, StaticReshapes and StaticSlices they make keep it (a DynamicSize, written 0 in a
reshape or a slice's sizes). Slices, splits and concatenations take it only off their axis (their checks)."""


def excluded(node: Node, globs: tuple[str, ...]) -> str | None:
    """The glob of option `exclude` that one of the node's modules matches, or None."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, _ in stack.values():
        for glob in globs:
            if path and fnmatch(path, glob):
                return glob
    return None


def reason(node: Node, checker: Checker, options: XnnpackOptions) -> str | None:
    """Why XNNPACK does not take this call (None: it does)."""
    rule = RULES.get(node.target)
    if rule is None:
        return "XNNPACK has no node for it"
    glob = excluded(node, options.exclude)
    if glob is not None:
        return f"its module matches option exclude {glob!r}"
    if decomposes(rule, node) and not options.decompose:
        return "taken only decomposed (option decompose is false)"
    return _tensor_reason(node, rule.dtypes) or rule.check(node, checker)


def reasons(graph: torch.fx.Graph, constants: Mapping[Node, torch.Tensor],
            options: XnnpackOptions) -> dict[Node, str | None]:
    """Every call's reason (None: taken), in graph order; a getitem goes with the call it reads."""
    checker = Checker(Known(constants))
    out: dict[Node, str | None] = {}
    for node in graph.nodes:
        if node.op != "call_function" or node in constants:
            continue
        if node.target is operator.getitem:
            source = node.args[0]
            out[node] = out.get(source, "reads a call no backend takes") if isinstance(source, Node) else "no call"
        else:
            out[node] = reason(node, checker, options)
    return out
