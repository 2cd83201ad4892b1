"""Lower stage: ATen ExportedProgram → core ATen → folded → out-variant program (`lowered.pte`).

Takes: `export.pt2`. Gives: an unplanned program in the `.pte` format — every call an
out-variant KernelCall, constants folded and stored in the constant segment, tensors not
yet placed in memory, one frame list per instruction naming where it came from.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.export import ExportedProgram

from etbuild.fsutil import write_bytes
from etbuild.lowering.builder import ConstantPool
from etbuild.lowering.fold import fold_constants
from etbuild.lowering.to_program import GraphConverter
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import write_program


def lower(ep: ExportedProgram, method: str = "forward") -> tuple[fb.Program, list[bytes]]:
    """The unplanned program and its segment payloads for one exported method."""
    core = ep.run_decompositions()
    pool = ConstantPool()
    plan = GraphConverter(core, fold_constants(core), method, pool).convert()
    data, offsets = pool.segment()
    program = fb.Program(
        version=0,
        execution_plan=[plan],
        constant_segment=fb.SubsegmentOffsets(segment_index=0, offsets=offsets),
    )
    return program, [data]


def run_lower(export_path: Path, out: Path) -> None:
    """Load `export.pt2`, lower it and write `lowered.pte`."""
    program, segments = lower(torch.export.load(str(export_path)))
    write_bytes(out, write_program(program, segments))
