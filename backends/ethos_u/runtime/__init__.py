"""The Ethos-U backend's runtime half (torch-free): a functional simulation for machines without an NPU.

init parses the `vela_bin_stream` blob with the checks ExecuTorch's runtime makes (format/blob.py) and finds
the partition's TOSA graph in the named data (`tosa_key(blob)`, put there by etbuild's preprocess; in a
`.ptd` given at load when a release dropped it from the program, etbuild.release.simulation);
execute checks each argument's element count against the blob's I/O, as the NPU path does, and runs the
TOSA graph in the TOSA reference model. Results are the TOSA specification's; an NPU is budgeted ±1 LSB
from them (ARM-ETHOSU.md §4), and no timing is simulated: Vela's estimate is in the build's reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from etbuild.backends.ethos_u.format.blob import VelaBin, parse, tosa_key
from etbuild.backends.tosa.format import block_io
from etbuild.backends.tosa.runtime.reference import SIMULATION, ReferenceGraph, write_outputs
from etbuild.errors import InvalidProgram, KernelError


class EthosUDelegate:
    """One Ethos-U delegate, run through its TOSA graph."""

    planned_bytes = 0
    simulation = SIMULATION

    def __init__(self, bin_: VelaBin, tosa: bytes) -> None:
        inputs, outputs = block_io(tosa)
        if (len(inputs), len(outputs)) != (len(bin_.inputs), len(bin_.outputs)):
            raise InvalidProgram(f"Ethos-U delegate: its blob has {len(bin_.inputs)} inputs and {len(bin_.outputs)}"
                                 f" outputs, its TOSA graph {len(inputs)} and {len(outputs)}")
        self.bin, self.graph = bin_, ReferenceGraph(tosa)
        self.arg_count = len(inputs) + len(outputs)
        self.output_positions = tuple(range(len(inputs), self.arg_count))

    def execute(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        for k, io in enumerate((*self.bin.inputs, *self.bin.outputs)):
            a = np.asarray(args[k])
            if a.size != io.elements or a.itemsize != io.elem_size:
                raise KernelError(f"Ethos-U delegate argument {k}: {a.size} elements of {a.itemsize} bytes; its "
                                  f"blob expects {io.elements} of {io.elem_size}")
        results = self.graph.run([np.asarray(a) for a in args[:len(self.bin.inputs)]])
        return write_outputs(results, [args[k] for k in self.output_positions])


class EthosUBackend:
    """The runtime half of the Ethos-U backend (backend id `EthosUBackend`)."""

    id = "EthosUBackend"
    simulation = SIMULATION

    def init(self, blob: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
             ) -> EthosUDelegate:
        """Parse the blob and find its TOSA graph; InvalidProgram when either is missing or malformed.
        compile_specs are not read (ExecuTorch's Cortex-M runtime drops them too)."""
        parsed = parse(blob)
        key = tosa_key(blob)
        if key not in named_data:
            raise InvalidProgram(
                f"Ethos-U delegate: its TOSA graph ({key}) is neither in the program nor in a data file given: "
                "etbuild's runtime simulates a delegate by its TOSA graph. A release drops the graphs from its "
                "programs (simulation_data: drop) and keeps them in build/release/<release>/simulation/"
                "<product>.ptd: pass that file with --data (Program.load(pte, data=[...])), or run the .pte "
                "etbuild build wrote. A delegate built by ExecuTorch carries none (an NPU or Arm's FVP runs it)")
        return EthosUDelegate(parsed, bytes(named_data[key]))


BACKEND = EthosUBackend()

__all__ = ["BACKEND", "EthosUBackend", "EthosUDelegate"]
