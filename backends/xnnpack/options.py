"""What a recipe may set for the XNNPACK backend (`backends: [{name: xnnpack, options: {...}}]`). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class XnnpackOptions:
    """The XNNPACK backend's options; the defaults delegate everything it can run."""

    exclude: tuple[str, ...] = field(default=(), metadata={
        "kind": "globs",
        "doc": "module paths (fnmatch globs, e.g. 'head*') whose operators stay out of every partition",
    })
    min_nodes: int = field(default=1, metadata={
        "kind": "count", "doc": "the fewest operators a partition needs to become a delegate",
    })
    decompose: bool = field(default=True, metadata={
        "kind": "bool", "doc": "take operators XNNPACK has no node for (layer_norm, a mean over any dims, ...) "
                               "as several nodes it has; false takes only what maps onto its nodes directly",
    })


OPTIONS = XnnpackOptions
