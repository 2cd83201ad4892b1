"""Weights apart from the program: constants and delegates' named data moved to a `.ptd`.

Takes: a planned program with its segments and each constant's key (etbuild.lowering.constant_names).
Gives: the program whose chosen constants are EXTERNAL tensors naming their key (their
`data_buffer_idx` a 1-based position ExecuTorch's runtime ignores), whose chosen named data is
gone from `Program.named_data`, with the segments nothing refers to any more dropped, and the
entries of the data file: key -> (bytes, tensor layout; None for a delegate's blob).

Mutable state stays in the program (ExecuTorch never moves it either). One key with two
values (two methods' constants named alike but unequal) is a build error: ExecuTorch's writer
keeps the last and both methods silently run with it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from etbuild.errors import StageError
from etbuild.lowering.builder import ConstantPool
from etbuild.runtime.format import flat_tensor as ft
from etbuild.runtime.format import program as fb
from etbuild.runtime.values import tensor_nbytes

Entries = dict[str, tuple[bytes, "ft.TensorLayout | None"]]


@dataclass(frozen=True)
class Separated:
    """The program without its external weights, its segments, and the data file's entries."""

    program: fb.Program
    segments: list[bytes]
    entries: Entries


def chosen(key: str, only: Sequence[str] | None) -> bool:
    """Whether a key goes to the data file: every key without `only`, else a key whose name (or the
    part before `#`, for a folded constant's key) matches one of the globs."""
    if only is None:
        return True
    name = key.split("#", 1)[0]
    return any(fnmatch.fnmatchcase(key, g) or fnmatch.fnmatchcase(name, g) for g in only)


def separate(program: fb.Program, segments: Sequence[bytes], names: Mapping[str, Mapping[int, str]],
             only: Sequence[str] | None = None) -> Separated:
    """Move the chosen constants and named data out of `program` (changed in place)."""
    entries: Entries = {}
    owners: dict[str, str] = {}
    pool_view = _pool(program, segments)
    kept = ConstantPool()
    for plan in program.execution_plan:
        method = plan.name or ""
        for i, ev in enumerate(plan.values):
            t = ev.val
            if not isinstance(t, fb.Tensor) or t.allocation_info is not None or t.data_buffer_idx <= 0:
                continue
            where = f"method {method!r} value {i}"
            data = _bytes(pool_view, t, where)
            key = names.get(method, {}).get(i)
            if key is None or not chosen(key, only):
                t.data_buffer_idx = kept.add(data)
                continue
            _add(entries, owners, key, (data, _layout(t)), method)
            t.extra_tensor_info = fb.ExtraTensorInfo(fully_qualified_name=key, location=fb.TensorDataLocation.EXTERNAL)
            t.data_buffer_idx = list(entries).index(key) + 1
    out = list(segments)
    if program.constant_segment is not None:
        out[program.constant_segment.segment_index], offsets = kept.segment()
        program.constant_segment.offsets = offsets
    named = []
    for item in program.named_data:
        if item.key and chosen(item.key, only):
            _add(entries, owners, item.key, (bytes(segments[item.segment_index]), None), "named data")
        else:
            named.append(item)
    program.named_data = named
    return Separated(program, _drop_unused(program, out), entries)


def _add(entries: Entries, owners: dict[str, str], key: str, value: tuple[bytes, ft.TensorLayout | None],
         owner: str) -> None:
    if key in entries and _comparable(entries[key]) != _comparable(value):
        raise StageError(f"weights key {key!r} holds different values in {owners[key]} and in {owner}: one key, "
                         "one value (ExecuTorch would run both with the last)")
    entries.setdefault(key, value)
    owners.setdefault(key, owner)


def _comparable(value: tuple[bytes, ft.TensorLayout | None]) -> tuple[object, ...]:
    data, layout = value
    if layout is None:
        return (data,)
    return (data, layout.scalar_type, tuple(layout.sizes), bytes(layout.dim_order))


def _layout(t: fb.Tensor) -> ft.TensorLayout:
    return ft.TensorLayout(t.scalar_type, [int(s) for s in t.sizes], bytes(t.dim_order))


def _pool(program: fb.Program, segments: Sequence[bytes]) -> list[memoryview]:
    """The constant pool's blobs by data_buffer_idx (each runs to the end of the segment)."""
    sub = program.constant_segment
    if sub is None or not sub.offsets:
        return []
    seg = memoryview(segments[sub.segment_index])
    return [seg[off:] for off in sub.offsets]


def _bytes(pool: list[memoryview], t: fb.Tensor, where: str) -> bytes:
    _, nbytes = tensor_nbytes(t, where)
    if not 0 < t.data_buffer_idx < len(pool) or len(pool[t.data_buffer_idx]) < nbytes:
        raise StageError(f"{where}: constant {t.data_buffer_idx} is not in the constant segment")
    return bytes(pool[t.data_buffer_idx][:nbytes])


def _drop_unused(program: fb.Program, segments: list[bytes]) -> list[bytes]:
    """Keep the segments something still refers to, renumbering the references."""
    subs = [*([program.constant_segment] if program.constant_segment is not None else []),
            *program.mutable_data_segments]
    delegates = [d.processed for p in program.execution_plan for d in p.delegates
                 if d.processed is not None and d.processed.location == fb.DataLocation.SEGMENT]
    used = sorted({r.segment_index for r in [*subs, *program.named_data]} | {d.index for d in delegates})
    renumber = {old: new for new, old in enumerate(used)}
    for sub in subs:
        sub.segment_index = renumber[sub.segment_index]
    for item in program.named_data:
        item.segment_index = renumber[item.segment_index]
    for d in delegates:
        d.index = renumber[d.index]
    return [segments[i] for i in used]
