"""Decomposes an ATen graph into core ATen with torch's default table (`run_decompositions`).

Operators outside core ATen that have no decomposition stay as they are; the fit-operator-set
step decomposes further what ExecuTorch's runtime lacks, or names it. An operator a backend of
the recipe takes as one node, which the table would split and ExecuTorch's kernels lack
(XNNPACK's `hardswish`: four nodes decomposed, one kept), stays whole for the partition step;
what no delegate then takes is decomposed after it (`decompose_outside`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from torch.export import default_decompositions

from etbuild.lowering.forms import GraphMethod, GraphProgram
from etbuild.lowering.operator_set import available
from etbuild.lowering.partition import backend_operators
from etbuild.lowering.steps import each_method


def to_core_aten(method: GraphMethod, table: dict[Any, Any] | None = None) -> GraphMethod:
    """The method with its graph in core ATen, by `table` (torch's default one when None)."""
    return replace(method, exported=method.exported.run_decompositions(table))


def kept_whole(backends: tuple[Any, ...], table: Mapping[Any, Any]) -> frozenset[Any]:
    """The operators of `table` a backend of the recipe may take that ExecuTorch's kernels lack."""
    return frozenset(op for op in backend_operators(backends) if op in table and not available(op))


def core_aten_program(program: GraphProgram) -> GraphProgram:
    """Every method in core ATen, keeping whole what a backend of the recipe takes as one node."""
    table = default_decompositions()
    for op in kept_whole(program.backends, table):
        del table[op]
    return each_method(lambda method: to_core_aten(method, table))(program)
