"""Values known at build time: the method's folded constants and what is computed from them alone.

Lowering folds a node only when its result is no larger than what it reads, so the
dequantization of an int8 weight stays a call in the graph; the backend reads through it
(`value` computes it, `quantized` finds the int8 weight behind it). A node is known when
it is a constant or a deterministic call whose inputs are all known.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import torch
from torch._ops import OpOverload
from torch.fx import Node

SLACK_BYTES = 64
"""As lowering's constant folding: a value this much larger than its inputs may still be stored."""

CREATIONS = (torch.ops.aten.full.default, torch.ops.aten.scalar_tensor.default, torch.ops.aten.zeros.default,
             torch.ops.aten.ones.default)
"""Calls that make a tensor from their arguments alone (never `empty`: its values are undefined)."""


def _pure(target: Any) -> bool:
    """A call that gives the same result for the same inputs and changes nothing."""
    return target is operator.getitem or isinstance(target, OpOverload) and not target._schema.is_mutable and (
        torch.Tag.nondeterministic_seeded not in target.tags)


def _nbytes(node: Node) -> int:
    """The bytes of the node's value (of all its results, for a call with several)."""
    vals = node.meta.get("val")
    vals = vals if isinstance(vals, (list, tuple)) else [vals]
    return sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))


def _storable(node: Node, inputs: list[Node], constants: Mapping[Node, torch.Tensor]) -> bool:
    """Whether the backend may store the node's value in its blob. Dequantizations are read through
    (the backend finds the int8 weight behind them). A call on lowering's constants alone that
    lowering left unfolded stays a call: its value is larger than what it reads, or takes bytes the
    program stores anyway (a relative-position bias gathered from a table); lowering folds only calls
    with one tensor result. Any other call counts
    when its value is no larger than what it is computed from."""
    if isinstance(node.target, OpOverload) and node.target.namespace == "quantized_decomposed":
        return True
    if isinstance(node.meta.get("val"), torch.Tensor) and all(n in constants for n in inputs):
        return False
    return _nbytes(node) <= sum(_nbytes(n) for n in inputs) + SLACK_BYTES


class Known:
    """The build-time values of one method's graph, computed on demand and kept."""

    def __init__(self, constants: Mapping[Node, torch.Tensor]) -> None:
        self.constants = constants
        self._values: dict[Node, torch.Tensor] = {}
        self._known: dict[Node, bool] = {}

    def __contains__(self, arg: Any) -> bool:
        if not isinstance(arg, Node):
            return False
        if arg in self.constants:
            return True
        if arg not in self._known:
            inputs = arg.all_input_nodes
            self._known[arg] = arg.op == "call_function" and (arg.target in CREATIONS or (
                _pure(arg.target) and bool(inputs) and all(n in self for n in inputs)
                and _storable(arg, inputs, self.constants)))
        return self._known[arg]

    def value(self, node: Node) -> torch.Tensor:
        """The node's value (KeyError when it is not known at build time)."""
        if node in self.constants:
            return self.constants[node]
        if node not in self:
            raise KeyError(node.name)
        if node not in self._values:
            args = torch.fx.node.map_aggregate(node.args, lambda a: self.value(a) if isinstance(a, Node) else a)
            kwargs = torch.fx.node.map_aggregate(node.kwargs, lambda a: self.value(a) if isinstance(a, Node) else a)
            with torch.no_grad():
                self._values[node] = node.target(*args, **kwargs)  # type: ignore[operator]
        return self._values[node]
