"""The TOSA backend's runtime half (torch-free): runs a `TOSABackend` delegate's flatbuffer in the TOSA
reference model (reference.py), a functional simulation. `BACKEND` is what the backend registry loads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from etbuild.backends.tosa.format import block_io
from etbuild.backends.tosa.runtime.reference import SIMULATION, ReferenceGraph, write_outputs


class TosaDelegate:
    """One TOSA graph: its inputs are the call's first arguments, its outputs the rest, in block order."""

    planned_bytes = 0
    simulation = SIMULATION

    def __init__(self, tosa: bytes, inputs: int, outputs: int) -> None:
        self.graph, self.inputs = ReferenceGraph(tosa), inputs
        self.arg_count = inputs + outputs
        self.output_positions = tuple(range(inputs, inputs + outputs))

    def execute(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        results = self.graph.run([np.asarray(a) for a in args[:self.inputs]])
        return write_outputs(results, [args[k] for k in self.output_positions])


class TosaBackend:
    """The runtime half of the TOSA backend (backend id `TOSABackend`)."""

    id = "TOSABackend"
    simulation = SIMULATION

    def init(self, blob: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
             ) -> TosaDelegate:
        tosa = bytes(blob)
        inputs, outputs = block_io(tosa)
        return TosaDelegate(tosa, len(inputs), len(outputs))


BACKEND = TosaBackend()

__all__ = ["BACKEND", "TosaBackend", "TosaDelegate"]
