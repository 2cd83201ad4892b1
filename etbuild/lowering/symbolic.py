"""Symbolic sizes: upper bounds of dynamic dims, and SymInt arithmetic as prim ops."""

from __future__ import annotations

import operator

import torch

from etbuild.graphs.method import upper_bound

# Python operators on SymInts in an exported graph → the program's prim operators.
PRIM_OPS = {
    operator.add: "executorch_prim::add",
    operator.sub: "executorch_prim::sub",
    operator.mul: "executorch_prim::mul",
    operator.floordiv: "executorch_prim::floordiv",
    operator.truediv: "executorch_prim::truediv",
    operator.mod: "executorch_prim::mod",
    operator.eq: "executorch_prim::eq",
    operator.gt: "executorch_prim::gt",
    operator.lt: "executorch_prim::lt",
    operator.ge: "executorch_prim::ge",
    operator.le: "executorch_prim::le",
    operator.neg: "executorch_prim::neg",
}


def shape_bounds(t: torch.Tensor) -> tuple[list[int], bool]:
    """The tensor's sizes at their upper bounds, and whether any size is symbolic."""
    sizes = [upper_bound(s) for s in t.shape]
    return sizes, any(not isinstance(s, int) for s in t.shape)
