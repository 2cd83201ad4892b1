"""One method as a graph, and the largest value each of its sizes can take.

The lowering steps (`etbuild.lowering`) and the backends' AOT halves (`etbuild.backends.aot` and each backend's
`aot/`) both read these, and lowering calls the backends: so they sit below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from etbuild.errors import StageError


@dataclass(frozen=True)
class GraphMethod:
    """One method as a graph: its ExportedProgram and the nodes whose values are known at build time."""

    name: str
    exported: ExportedProgram
    constants: Mapping[Node, torch.Tensor] = field(default_factory=dict)


def upper_bound(size: Any) -> int:
    """An int for a static size; the largest value a symbolic size can take otherwise."""
    if isinstance(size, int):
        return size
    node = size.node
    bound = node.shape_env.bound_sympy(node.expr).upper
    if not bound.is_finite:
        raise StageError(f"size {size} has no upper bound; give every dynamic dim a max in the recipe")
    return int(bound)
