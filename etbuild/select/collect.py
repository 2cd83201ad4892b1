"""Collect what a final `.pte` needs: every operator call with its dtypes, the backends, the runtime features.

Reads the emitted program (no torch). With the unplanned `lowered.unplanned` written before emit
(same methods, same instruction indices, plus `chains[0].stacktrace`: one frame list per
instruction), each call also records the model source line and module path that made it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from etbuild.errors import InvalidProgram, StageError
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import ExtendedHeader, read_program
from etbuild.runtime.kernel_registry import canonical_name
from etbuild.runtime.tensor import numpy_dtype
from etbuild.select.features import program_features, program_scalar_types
from etbuild.select.selection import CallSite, Selection, SourceLocation, build

KERNEL_KEY_VERSION = "v1"
Frames = dict[str, list[tuple[SourceLocation, ...]]]


def collect(pte_path: str | Path, lowered_path: str | Path | None = None) -> Selection:
    """The Selection of one program; source locations come from `lowered_path` when given."""
    data = Path(pte_path).read_bytes()
    program, header = _read(Path(pte_path), data)
    frames = _frames(_read(Path(lowered_path))[0], program) if lowered_path is not None else {}
    calls: dict[str, list[CallSite]] = {}
    backends: list[str] = []
    for plan in program.execution_plan:
        method = plan.name or ""
        sources = frames.get(method, [])
        for pc, ins in enumerate(plan.chains[0].instructions if plan.chains else []):
            args = ins.instr_args
            if isinstance(args, fb.KernelCall):
                name = _operator(plan, args.op_index)
                where = sources[pc] if pc < len(sources) else ()
                calls.setdefault(name, []).append(_call_site(str(pte_path), plan, pc, args, where))
            elif isinstance(args, fb.DelegateCall):
                backends.append(_backend(plan, args.delegate_index))
    return build(calls, backends, [str(pte_path)], program_features(program, data, header),
                 program_scalar_types(program))


def _read(path: Path, data: bytes | None = None) -> tuple[fb.Program, ExtendedHeader | None]:
    try:
        return read_program(path.read_bytes() if data is None else data)
    except InvalidProgram as exc:
        raise InvalidProgram(f"{path}: {exc}") from None


def _operator(plan: fb.ExecutionPlan, index: int) -> str:
    if not 0 <= index < len(plan.operators):
        raise InvalidProgram(f"method {plan.name!r}: operator index {index} is out of range")
    op = plan.operators[index]
    return canonical_name(op.name or "", op.overload or "")


def _backend(plan: fb.ExecutionPlan, index: int) -> str:
    if not 0 <= index < len(plan.delegates):
        raise InvalidProgram(f"method {plan.name!r}: delegate index {index} is out of range")
    return plan.delegates[index].id or ""


def _call_site(
    program: str, plan: fb.ExecutionPlan, pc: int, call: fb.KernelCall, sources: tuple[SourceLocation, ...]
) -> CallSite:
    dtypes = tuple(dtype_name(t.scalar_type) for i in call.args for t in _tensors(plan, i))
    return CallSite(program, plan.name or "", pc, dtypes, kernel_key(plan, call.args), sources)


def _tensors(plan: fb.ExecutionPlan, index: int) -> Iterator[fb.Tensor]:
    """The tensors value `index` holds: itself, or a (optional) tensor list's present items."""
    val = _value(plan, index)
    if isinstance(val, fb.Tensor):
        yield val
    elif isinstance(val, (fb.TensorList, fb.OptionalTensorList)):
        for j in val.items:
            item = _value(plan, j) if j >= 0 else None
            if isinstance(item, fb.Tensor):
                yield item


def _value(plan: fb.ExecutionPlan, index: int) -> object:
    if not 0 <= index < len(plan.values):
        raise InvalidProgram(f"method {plan.name!r}: value index {index} is out of range")
    return plan.values[index].val


def dtype_name(code: int) -> str:
    """The numpy dtype name of a ScalarType code (`ScalarType(15)` when numpy has none)."""
    try:
        return numpy_dtype(code).name
    except InvalidProgram:
        return f"ScalarType({code})"


def kernel_key(plan: fb.ExecutionPlan, args: list[int]) -> str:
    """ExecuTorch's kernel key: `v1/` + `dtype;dim,order` per tensor argument, `|`-joined.

    A tensor list contributes one entry, its first present tensor, as ExecuTorch's
    `gen_oplist` does.
    """
    parts = []
    for i in args:
        tensor = next(_tensors(plan, i), None)
        if tensor is not None:
            parts.append(f"{tensor.scalar_type};{','.join(str(d) for d in bytes(tensor.dim_order))}")
    return f"{KERNEL_KEY_VERSION}/" + "|".join(parts)


def _frames(lowered: fb.Program, final: fb.Program) -> Frames:
    """Per method, per instruction: the source locations the lowered program records."""
    by_name = {p.name or "": p for p in lowered.execution_plan}
    out: Frames = {}
    for plan in final.execution_plan:
        method = plan.name or ""
        low = by_name.get(method)
        if low is None and not any(chain.instructions for chain in plan.chains):
            continue  # a constant method, added by emit (a language model's): no calls, no frames
        if low is None:
            raise StageError(f"the lowered program has no method {method!r}: it does not match the .pte")
        _check_same_calls(low, plan)
        stack = (low.chains[0].stacktrace or []) if low.chains else []
        out[method] = [tuple(SourceLocation.from_frame(f) for f in frames.items) for frames in stack]
    return out


def _check_same_calls(lowered: fb.ExecutionPlan, final: fb.ExecutionPlan) -> None:
    def ops(plan: fb.ExecutionPlan) -> list[str | None]:
        instructions = plan.chains[0].instructions if plan.chains else []
        return [
            _operator(plan, ins.instr_args.op_index) if isinstance(ins.instr_args, fb.KernelCall) else None
            for ins in instructions
        ]

    if ops(lowered) != ops(final):
        raise StageError(
            f"method {final.name!r}: the lowered program's instructions differ from the .pte's; "
            "was it written by the same build?"
        )
