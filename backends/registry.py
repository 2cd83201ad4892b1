"""The runtime backends: backend id -> the module that executes its delegates. Torch-free.

A program's `BackendDelegate` names a backend id (`XnnpackBackend`); the runtime initialises
each delegate of a plan once, at load_method, with that backend's `init`, and binds every
`DelegateCall` to the handle it returns. BACKENDS is the one explicit table, read without
importing anything, so that selective build can ship only the backends a product's programs
name (a trimmed runtime replaces this table). A backend module is imported the first time a
program names its id, and exposes `BACKEND`, an object satisfying `RuntimeBackend`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

BACKENDS: dict[str, str] = {
    "XnnpackBackend": "etbuild.backends.xnnpack.runtime",
}


class DelegateHandle(Protocol):
    """An initialised delegate.

    arg_count: how many values its DelegateCall passes (inputs and outputs, in its order);
    output_positions: which of them it writes; planned_bytes: the working memory it holds,
    which counts against the method's memory limit (`load_method(max_planned_bytes=...)`).
    """

    arg_count: int
    output_positions: tuple[int, ...]
    planned_bytes: int

    def execute(self, args: Sequence[Any]) -> Sequence[np.ndarray]:
        """Read the inputs, write the outputs, and return the output arrays in output_positions
        order: the caller's own arrays, or views of them resized to the computed shape."""
        ...


class RuntimeBackend(Protocol):
    """The runtime half of a backend."""

    def init(
        self, blob: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
    ) -> DelegateHandle:
        """Validate and prepare a delegate blob once; InvalidProgram when it is malformed.

        named_data: the program's named data (key -> bytes), where delegates keep their weights.
        """
        ...


def backend(backend_id: str) -> RuntimeBackend | None:
    """The runtime backend registered for an id; None when this runtime has none (or does not ship it)."""
    module = BACKENDS.get(backend_id)
    if module is None:
        return None
    try:
        return importlib.import_module(module).BACKEND
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):  # a trimmed runtime without this backend's package
            return None
        raise
