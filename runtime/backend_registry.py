"""The backend registry and the runtime half of the backend contract. Torch-free.

A backend has an AOT half (partition a graph, preprocess each partition into a blob; it may
use torch; its contract is `etbuild.backends.aot.AotBackend`) and a runtime half (init a
blob once, execute it per call; torch-free; `RuntimeBackend` below), as ExecuTorch's
`runtime/backend/interface.h` has it (docs/architecture.md). BACKENDS is the one explicit
table, read without importing anything: the build looks a recipe's `backends:` names up
here, the runtime looks a program's `BackendDelegate.id` up here, and selective build ships
only the backends a product's programs name (a trimmed runtime replaces this table). A module is imported the first time
it is needed; each exposes `BACKEND` (the runtime one a `RuntimeBackend`, the AOT one an
`AotBackend`) and the options module `OPTIONS`, the frozen dataclass of what a recipe may set.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class Backend:
    """One backend: the id programs name, and where its halves and its recipe options live."""

    id: str  # BackendDelegate.id in a program (the id ExecuTorch's runtime registers)
    runtime: str  # torch-free module exposing BACKEND: RuntimeBackend
    aot: str  # module exposing BACKEND: AotBackend (may import torch)
    options: str  # torch-free module exposing OPTIONS: the dataclass of the recipe's `options`
    schemas: tuple[str, ...] = ()  # files of etbuild.schema its runtime decodes (via reader.schema_layout)
    memory: str = ""  # torch-free build-side module exposing delegate_memory (etbuild.memory.delegates), or none


BACKENDS: dict[str, Backend] = {
    "xnnpack": Backend(
        id="XnnpackBackend",
        runtime="etbuild.backends.xnnpack.runtime",
        aot="etbuild.backends.xnnpack.aot",
        options="etbuild.backends.xnnpack.options",
        schemas=("xnnpack.fbs",),
    ),
    "ethos-u": Backend(
        id="EthosUBackend",
        runtime="etbuild.backends.ethos_u.runtime",
        aot="etbuild.backends.ethos_u.aot",
        options="etbuild.backends.ethos_u.options",
        memory="etbuild.backends.ethos_u.memory",
    ),
    "tosa": Backend(
        id="TOSABackend",
        runtime="etbuild.backends.tosa.runtime",
        aot="etbuild.backends.tosa.aot",
        options="etbuild.backends.tosa.options",
    ),
}


class DelegateHandle(Protocol):
    """An initialised delegate.

    arg_count: how many values its DelegateCall passes (inputs and outputs, in its order);
    output_positions: which of them it writes; planned_bytes: the working memory it holds,
    which counts against the method's memory limit (`load_method(max_planned_bytes=...)`).
    A handle may also offer `steady(args) -> Step | None`: what runs a call with the very tuple of its last
    `execute` again (None for another tuple), which the method runs while the call's arrays stay the same objects
    and the outputs it returned were those passed; with `quiet` true, under `np.errstate(all="ignore")`.
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


def backend_ids() -> list[str]:
    """The ids of the backends this runtime has, sorted."""
    return sorted(b.id for b in BACKENDS.values())


def backend(backend_id: str) -> RuntimeBackend | None:
    """The runtime backend registered for an id; None when this runtime has none (or does not ship it)."""
    for entry in BACKENDS.values():
        if entry.id == backend_id:
            return _runtime_module(entry.runtime)
    return None


def _runtime_module(module: str) -> RuntimeBackend | None:
    """The BACKEND of a runtime module; None when a trimmed runtime lacks its package."""
    try:
        return importlib.import_module(module).BACKEND  # type: ignore[no-any-return]
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            return None
        raise


def backend_options(name: str) -> type:
    """The options dataclass of the backend a recipe calls `name` (a key of BACKENDS)."""
    return importlib.import_module(BACKENDS[name].options).OPTIONS  # type: ignore[no-any-return]
