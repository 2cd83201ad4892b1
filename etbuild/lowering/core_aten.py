"""Decomposes an ATen graph into core ATen with torch's default table (`run_decompositions`).

Operators outside core ATen that have no decomposition stay as they are; the fit-operator-set
step decomposes further what ExecuTorch's runtime lacks, or names it.
"""

from __future__ import annotations

from dataclasses import replace

from etbuild.lowering.forms import GraphMethod


def to_core_aten(method: GraphMethod) -> GraphMethod:
    """The method with its graph in core ATen."""
    return replace(method, exported=method.exported.run_decompositions())
