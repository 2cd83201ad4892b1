"""Lower stage: ATen ExportedPrograms → core ATen → folded → out-variant program (`lowered.pte`).

Takes: one `export/<method>.pt2` per method. Gives: an unplanned program in the `.pte`
format — one ExecutionPlan per method (sorted by name, as ExecuTorch stores them), every
call an out-variant KernelCall, constants folded (inference BatchNorms into the
convolutions before them) and stored once in the constant segment,
initial states of mutable buffers in the mutable data segment, tensors not yet placed in
memory, one frame list per instruction naming where it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch.export import ExportedProgram

from etbuild.fsutil import write_bytes
from etbuild.lowering.builder import ConstantPool
from etbuild.lowering.fold import fold_constants
from etbuild.lowering.fuse_batch_norm import fuse_batch_norm
from etbuild.lowering.to_program import GraphConverter
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import write_program


def lower(methods: Mapping[str, ExportedProgram]) -> tuple[fb.Program, list[bytes]]:
    """The unplanned program and its segment payloads (constants, then mutable state)."""
    pool, mutable = ConstantPool(), ConstantPool()
    plans = []
    for name in sorted(methods):
        core = methods[name].run_decompositions()
        consts = fold_constants(core)
        fuse_batch_norm(core.graph, consts)
        plans.append(GraphConverter(core, consts, name, pool, mutable).convert())
    data, offsets = pool.segment()
    program = fb.Program(
        version=0, execution_plan=plans, constant_segment=fb.SubsegmentOffsets(segment_index=0, offsets=offsets)
    )
    segments = [data]
    if mutable.blobs:
        state, state_offsets = mutable.segment()
        program.mutable_data_segments = [fb.SubsegmentOffsets(segment_index=1, offsets=state_offsets)]
        segments.append(state)
    return program, segments


def run_lower(export_paths: Mapping[str, Path], out: Path) -> None:
    """Load each method's `.pt2`, lower them together and write `lowered.pte`."""
    methods = {name: torch.export.load(str(path)) for name, path in export_paths.items()}
    program, segments = lower(methods)
    write_bytes(out, write_program(program, segments))
