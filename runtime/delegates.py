"""The delegates of a plan, initialised once at load_method by the backends the runtime registers.

Each `BackendDelegate` names a backend id and its processed blob: a program segment (what
ExecuTorch writes) or an inline `backend_delegate_data` entry. The backend's `init` gets the
blob, the compile specs and the program's named data (key -> bytes: the segments that
`Program.named_data` lists, where delegates keep their weights). While a backend initialises a delegate,
`fixed_shapes()` says whether the plan calls it with tensors of one shape only, so that it may lay out its
constants for the shapes it will see.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import Any

from etbuild.errors import InvalidProgram
from etbuild.runtime.backend_registry import DelegateHandle, RuntimeBackend, backend, backend_ids
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import ExtendedHeader, segment_bytes

Lookup = Callable[[str], "RuntimeBackend | None"]

_fixed: contextvars.ContextVar[bool] = contextvars.ContextVar("etbuild_fixed_shapes", default=False)


def fixed_shapes() -> bool:
    """Whether the delegate being initialised takes tensors of one shape only: every argument of every call to it
    in the plan is a STATIC tensor (False outside `init_delegates`, and for a delegate with dynamic shapes)."""
    return _fixed.get()


def _static_delegates(plan: fb.ExecutionPlan) -> set[int]:
    """The indices of the plan's delegates whose every call passes only STATIC tensors."""
    static, dynamic = set(), set()
    values = plan.values
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if not isinstance(call, fb.DelegateCall):
                continue
            tensors = [values[i].val for i in call.args if 0 <= i < len(values)]
            if len(tensors) == len(call.args) and all(
                    not isinstance(t, fb.Tensor) or t.shape_dynamism == fb.TensorShapeDynamism.STATIC
                    for t in tensors):
                static.add(call.delegate_index)
            else:
                dynamic.add(call.delegate_index)
    return static - dynamic


def named_data(data: Any, program: fb.Program, header: ExtendedHeader | None) -> dict[str, memoryview]:
    """The program's named data: each key's segment, as a zero-copy view checked against the file."""
    named: dict[str, memoryview] = {}
    for k, entry in enumerate(program.named_data):
        if not entry.key:
            raise InvalidProgram(f"named_data[{k}] has no key")
        if entry.key in named:
            raise InvalidProgram(f"named_data[{k}]: key {entry.key!r} appears twice")
        named[entry.key] = segment_bytes(data, program, header, entry.segment_index)
    return named


def processed_blob(data: Any, program: fb.Program, header: ExtendedHeader | None, ref: Any, where: str) -> memoryview:
    """A delegate's processed bytes, from its segment or inline data."""
    if ref is None:
        raise InvalidProgram(f"{where}: no processed data")
    if ref.location == fb.DataLocation.SEGMENT:
        return segment_bytes(data, program, header, ref.index)
    inline = program.backend_delegate_data
    if ref.location != fb.DataLocation.INLINE or not 0 <= ref.index < len(inline):
        raise InvalidProgram(f"{where}: processed data {ref.location}/{ref.index} does not exist")
    return memoryview(inline[ref.index].data).cast("B")


def init_delegates(
    plan: fb.ExecutionPlan,
    blob: Callable[[Any, str], memoryview],
    named: Mapping[str, memoryview],
    lookup: Lookup = backend,
) -> dict[int, DelegateHandle]:
    """One handle per delegate of the plan, by delegate index; InvalidProgram naming a backend we lack."""
    handles: dict[int, DelegateHandle] = {}
    static = _static_delegates(plan)
    for k, d in enumerate(plan.delegates):
        where = f"delegate {k} ({d.id})"
        impl = lookup(d.id or "")
        if impl is None and d.id in backend_ids():
            raise InvalidProgram(f"{where}: backend {d.id!r} is not shipped with this (trimmed) runtime")
        if impl is None:
            known = ", ".join(backend_ids()) or "none"
            raise InvalidProgram(f"{where}: this runtime has no backend {d.id!r} (it has: {known})")
        specs = {s.key or "": bytes(s.value) for s in d.compile_specs}
        data = blob(d.processed, where)
        token = _fixed.set(k in static)
        try:
            handles[k] = impl.init(data, specs, named)
        except InvalidProgram as exc:
            raise InvalidProgram(f"{where}: {exc}") from None
        finally:
            _fixed.reset(token)
    return handles
