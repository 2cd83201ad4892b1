"""The operators the XNNPACK backend takes: one `Rule` per ATen overload, keyed in RULES.

A rule pairs what the partitioner asks (`check(node, checker)`: None when the node can be
delegated, else the reason it cannot) with what the serializer does (`emit(node, emitter)`:
define the node's XNNPACK values and nodes). `decomposes` marks operators XNNPACK has no
node for, taken as several nodes it has (only with the backend's `decompose` option): True,
or a function saying which calls of the operator decompose.
Every rule's check runs after the common ones in `support.py` (dtypes, static shapes, rank).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot.known import Known
from etbuild.backends.xnnpack.aot.shapes import sizes

if TYPE_CHECKING:
    from etbuild.backends.xnnpack.aot.emitter import Emitter

aten = torch.ops.aten
MAX_RANK = 6  # XNN_MAX_TENSOR_DIMS
SMALL = 4096
"""Elements (16 KB of float32) under which a node that only moves or normalizes data is left to the portable
kernels: XNNPACK splits every node over its thread pool, and on so little work the hand-offs cost more than
the pass (docs/models.md, "Small tensors at two threads")."""


def small(value: Node, what: str) -> str | None:
    """Why `what`, whose work is `value`'s elements, stays outside: fewer than SMALL of them (None: it need not)."""
    if math.prod(shape_of(value)) >= SMALL:
        return None
    return (f"a {what} of fewer than {SMALL} elements: one pass in the portable kernel, "
            "a node split over the thread pool in XNNPACK")


@dataclass(frozen=True)
class Checker:
    """What a support check may look at: the values known at build time."""

    known: Known

    def is_constant(self, arg: Any) -> bool:
        return arg in self.known


Check = Callable[[Node, Checker], "str | None"]
Emit = Callable[[Node, "Emitter"], None]


@dataclass(frozen=True)
class Rule:
    emit: Emit
    check: Check
    decomposes: bool | Callable[[Node], bool] = False
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)  # of its tensor inputs and outputs


RULES: dict[Any, Rule] = {}


def decomposes(rule: Rule, node: Node) -> bool:
    return rule.decomposes(node) if callable(rule.decomposes) else rule.decomposes


def _always(node: Node, checker: Checker) -> str | None:
    return None


def rule(*targets: Any, check: Check = _always, decomposes: bool | Callable[[Node], bool] = False,
         dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> Callable[[Emit], Emit]:
    """Register `emit` (and `check`) for these targets; a target registered twice is an error."""

    def register(emit: Emit) -> Emit:
        for target in targets:
            if target in RULES:
                raise ValueError(f"{target} already has an XNNPACK rule")
            RULES[target] = Rule(emit, check, decomposes, dtypes)
        return emit

    return register


def arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    """Argument `name` (position `index`) of a call, positional or keyword, or its default."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def shape_of(node: Any) -> tuple[int, ...]:
    """A node's tensor shape, a symbolic size as a DynamicSize at its upper bound (never `int()` of
    a SymInt: that guard would pin the export's symbol to its example size for the whole program)."""
    val = node.meta.get("val") if isinstance(node, Node) else None
    return sizes(val.shape) if isinstance(val, torch.Tensor) else ()


def normalize_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def normalize_dims(dims: Sequence[int] | int | None, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted({normalize_dim(d, rank) for d in dims}) if dims else list(range(rank))


def used_items(node: Node) -> set[int]:
    """The indices of a multi-output node's results that getitem nodes read and use."""
    return {int(u.args[1]) for u in node.users if u.target is operator.getitem and u.users}  # type: ignore[call-overload]


def only_first_used(node: Node) -> str | None:
    """A check for ops whose other results (pooling indices, saved statistics) XNNPACK cannot give."""
    extra = sorted(used_items(node) - {0})
    return f"result {extra[0]} is used" if extra else None
