"""Lower stage: ATen ExportedPrograms → an unplanned program (`lowered.unplanned`), in named steps.

Takes: one `export/<method>.pt2` per method (dialect `aten`). Gives: `lowered.unplanned`, the
program in ExecuTorch's format without a memory plan: one ExecutionPlan per method (sorted by
name, as ExecuTorch stores them), every call an out-variant KernelCall or, for the parts the
recipe's backends take, a DelegateCall of a delegate blob, constants folded (inference
BatchNorms into the convolutions before them) and stored once in the constant segment,
delegate blobs and their weights (named data) in segments of their own, initial states of
mutable buffers in the mutable data segment, tensors not yet placed in memory, one frame
list per instruction naming where it came from. With backends, `partition.json` and
`partition.svg` say what went to which delegate and why the rest stayed out. It does not end
in `.pte`: it is an intermediate, which no runtime can run before plan and emit place its tensors.
Beside it, `lowered.debug.json`: which graph node each value holds (etbuild.lowering.debug_map),
read by verify to localise a failure; it is not part of the program. And `etrecord.bin`, the
ETRecord that ExecuTorch's Inspector joins with an ETDump of the `.pte` (instruction ids do
not change after lowering), and, unless the only method is `forward`, `etrecord.<method>.bin`
per method (the one method the Inspector reads).

`LOWERING` lists the steps top to bottom. A new step is one entry there plus its module;
`etbuild build --dump-after STEP` writes the form after a step to `build/<recipe>/dump/`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch.export import ExportedProgram

from etbuild.devtools.etrecord import EtrecordCapture
from etbuild.devtools.etrecord_format import etrecord_path, write_etrecord, write_method_etrecords
from etbuild.fsutil import write_bytes, write_json
from etbuild.lowering.assertions import drop_assertions
from etbuild.lowering.batched_linear import fold_batched_linears
from etbuild.lowering.core_aten import core_aten_program
from etbuild.lowering.debug_map import to_json
from etbuild.lowering.decompose_outside import decompose_outside
from etbuild.lowering.fit import fit_program
from etbuild.lowering.fold_constants import fold_constants
from etbuild.lowering.forms import ATEN, CORE_ATEN, DELEGATED, UNPLANNED, GraphProgram, LoweredProgram
from etbuild.lowering.fuse_batch_norm import fuse_batch_norm
from etbuild.lowering.grouped_attention import grouped_attention
from etbuild.lowering.listing import listing
from etbuild.lowering.partition import partition
from etbuild.lowering.partition_report import PARTITION_FILES, PartitionReport
from etbuild.lowering.partition_svg import partition_svg
from etbuild.lowering.quantized_embeddings import fuse_quantized_embeddings
from etbuild.lowering.quantized_weights import move_weight_permutes
from etbuild.lowering.reinplace import in_place_calls
from etbuild.lowering.steps import Pipeline, Step, each_method
from etbuild.lowering.to_program import to_program
from etbuild.lowering.zero_points import drop_zero_points
from etbuild.recipe.config import BackendConfig
from etbuild.stages import handoff

LOWERING = Pipeline("lower", (
    Step("decompose", "ATen → core ATen with torch's default decomposition table (what a backend of the recipe "
         "takes as one node and ExecuTorch's kernels lack kept whole)", ATEN, CORE_ATEN, core_aten_program),
    Step("fold-linear", "bmm(x, expand(2-D weight)) → view(mm/addmm(view(x), weight)), as a linear layer on a "
         "contiguous input decomposes", CORE_ATEN, CORE_ATEN, each_method(fold_batched_linears)),
    Step("fit-operator-set", "decompose each call whose out-variant ExecuTorch's runtime lacks (and no backend of the "
         "recipe may take) into calls it has",
         CORE_ATEN, CORE_ATEN, fit_program),
    Step("move-weight-permutes", "permute(dequantize(int8 constant)) → dequantize(permute(int8 constant))",
         CORE_ATEN, CORE_ATEN, each_method(move_weight_permutes)),
    Step("fold-constants", "compute once, at build time, every node that reads only constants",
         CORE_ATEN, CORE_ATEN, fold_constants),
    Step("drop-assertions", "check at build time what can be, then drop, the calls that compute nothing",
         CORE_ATEN, CORE_ATEN, each_method(drop_assertions)),
    Step("fuse-batch-norm", "fold each inference BatchNorm into the convolution before it",
         CORE_ATEN, CORE_ATEN, each_method(fuse_batch_norm)),
    Step("drop-zero-points", "all-zero zero points of per-channel dequantize → None (symmetric int8 weights)",
         CORE_ATEN, CORE_ATEN, each_method(drop_zero_points)),
    Step("fuse-quantized-embeddings", "dequantize(int8/int4 table) → embedding becomes embedding_byte/4bit",
         CORE_ATEN, CORE_ATEN, each_method(fuse_quantized_embeddings)),
    Step("partition", "each backend of the recipe, in order, takes the parts it runs as delegates",
         CORE_ATEN, DELEGATED, partition),
    Step("decompose-outside", "decompose the calls kept whole for a backend that no delegate took",
         DELEGATED, DELEGATED, decompose_outside),
    Step("in-place-calls", "auto_functionalized(op, x) → op(x) writing x in place (a buffer stays the buffer)",
         DELEGATED, DELEGATED, each_method(in_place_calls)),
    Step("grouped-attention", "custom_sdpa over grouped-query heads → cond(one token: one call over the heads as "
         "rows; else the call)", DELEGATED, DELEGATED, each_method(grouped_attention)),
    Step("to-program", "each call → its out-variant KernelCall, each delegate → a DelegateCall; constants into "
         "one shared segment", DELEGATED, UNPLANNED, to_program),
))


def lower(methods: Mapping[str, ExportedProgram], after: Callable[[Step, Any], None] | None = None,
          backends: Sequence[BackendConfig] = ()) -> LoweredProgram:
    """The unplanned program of the exported methods, with the partitions of `backends` (in
    priority order) delegated; `after(step, form)` sees the form after each step."""
    return LOWERING.run(GraphProgram.of(methods, backends), after)


def dump_files(dump_dir: Path, steps: Iterable[str]) -> dict[str, Path]:
    """Step name → the file its dump goes to (`<dump_dir>/02-fold-constants.py`)."""
    return {step: dump_dir / LOWERING.dump_name(step) for step in steps}


def run_lower(
    export_paths: Mapping[str, Path], out: Path, debug: Path, dump_dir: Path, dump_after: Iterable[str] = (),
    backends: Sequence[BackendConfig] = (), names: Path | None = None,
) -> None:
    """Load each method's `.pt2`, lower them together and write `lowered.unplanned`, its debug
    map, the constants' keys (`names`, lowered.constants.json, etbuild.lowering.constant_names),
    `etrecord.bin` (etbuild.devtools.etrecord) and, with backends, `partition.json` and
    `partition.svg` beside it.

    `dump_dir` is emptied first, so every dump in it comes from the latest lowering; the form
    after each step of `dump_after` is written as soon as that step ends, so a failing step
    still leaves the dumps of the steps before it.
    """
    if dump_dir.exists():
        shutil.rmtree(dump_dir)
    files = dump_files(dump_dir, dump_after)

    def dump(step: Step, form: Any) -> None:
        if step.name in files:
            write_bytes(files[step.name], (listing(form) + "\n").encode())

    record = EtrecordCapture(graph_after=_step_before("fuse-batch-norm"), delegates_after=_step_before("to-program"))

    def after(step: Step, form: Any) -> None:
        dump(step, form)
        record(step, form)

    methods = {name: handoff.load(path) for name, path in export_paths.items()}
    lowered = lower(methods, after, backends)
    if lowered.report is not None:
        write_partition_report(lowered.report, out.parent)
    write_bytes(out, lowered.to_bytes())
    write_json(debug, to_json(lowered.debug))
    if names is not None:
        write_json(names, {m: {str(i): k for i, k in keys.items()} for m, keys in lowered.names.items()})
    records = record.records(lowered)
    write_etrecord(etrecord_path(out.parent), records)
    write_method_etrecords(out.parent, records)


def _step_before(name: str) -> str:
    return LOWERING.names[LOWERING.names.index(name) - 1]


def write_partition_report(report: PartitionReport, out_dir: Path) -> None:
    """partition.json (every method) and partition.svg (the first method's graph)."""
    write_json(out_dir / PARTITION_FILES[0], report.to_json())
    first = report.methods[0]
    title = f"{out_dir.name}: method {first.method}, backends {', '.join(report.backends)}"
    write_bytes(out_dir / PARTITION_FILES[1], partition_svg(first, title).encode())
