"""Which optional runtime features (`etbuild.runtime.features`) and tensor dtypes a program uses.

Read from the final program, the same way the runtime will see it: a trimmed runtime is
generated with exactly these features and dtypes, so it must never miss one the program needs.
"""

from __future__ import annotations

import importlib

from etbuild.errors import InternalError
from etbuild.runtime import features
from etbuild.runtime.backend_registry import BACKENDS
from etbuild.runtime.binding import rebound_values
from etbuild.runtime.data_files import is_external
from etbuild.runtime.delegates import processed_blob
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import ExtendedHeader
from etbuild.runtime.preload import preloadable
from etbuild.runtime.values import LIST_TYPES

VALUE_LIST_TYPES = (*LIST_TYPES, fb.DoubleList, fb.BoolList)
NATIVE_FLOATS = {fb.ScalarType.FLOAT, fb.ScalarType.DOUBLE}


def program_features(program: fb.Program, data: bytes | None = None, header: ExtendedHeader | None = None
                     ) -> tuple[str, ...]:
    """The names of the runtime features any method of the program needs, sorted. With the file's bytes,
    EXTERNAL_DATA only when a constant is external or a delegate may read a key the program does not hold."""
    found = set()
    for plan in program.execution_plan:
        found |= plan_features(plan)
    if data is not None and not (_external_constants(program) or _delegates_read_files(data, program, header)):
        found.discard("EXTERNAL_DATA")
    return tuple(sorted(found))


def _external_constants(program: fb.Program) -> bool:
    return any(isinstance(ev.val, fb.Tensor) and is_external(ev.val) for plan in program.execution_plan
               for ev in plan.values)


def _delegates_read_files(data: bytes, program: fb.Program, header: ExtendedHeader | None) -> bool:
    """Whether some delegate may read named data from a `.ptd`: one whose backend names the keys it reads
    (`data_keys(blob)` in its memory module, BACKENDS[name].memory) reads a key the program lacks; one whose
    backend does not name them might."""
    hooks = {b.id: getattr(importlib.import_module(b.memory), "data_keys", None) if b.memory else None
             for b in BACKENDS.values()}
    held = {item.key for item in program.named_data}
    for plan in program.execution_plan:
        for k, d in enumerate(plan.delegates):
            hook = hooks.get(d.id)
            if hook is None:
                return True
            blob = processed_blob(data, program, header, d.processed, f"delegate {k} ({d.id})")
            if not set(hook(blob)) <= held:
                return True
    return False


def plan_features(plan: fb.ExecutionPlan) -> set[str]:
    """The runtime features one execution plan needs."""
    instructions = [ins for chain in plan.chains for ins in chain.instructions]
    kinds = {type(ins.instr_args) for ins in instructions}
    values = [ev.val for ev in plan.values]
    tensors = [v for v in values if isinstance(v, fb.Tensor)]
    uses = {
        "CONTROL_FLOW": bool(kinds & {fb.MoveCall, fb.JumpFalseCall}),
        "DELEGATES": fb.DelegateCall in kinds,
        "DIM_ORDER": any(list(t.dim_order) not in ([], list(range(len(t.sizes)))) for t in tensors),
        "DTYPE_PROMOTION": any(_promotes(plan, ins.instr_args) for ins in instructions),
        "DYNAMIC_SHAPES": any(t.shape_dynamism != fb.TensorShapeDynamism.STATIC for t in tensors),
        # a delegate's named data may live in a data file; program_features asks the backends that name their keys
        "EXTERNAL_DATA": any(is_external(t) for t in tensors) or fb.DelegateCall in kinds,
        "LIVE_VALUES": bool(rebound_values(plan, instructions)),
        "MEMORY_LEVELS": len(plan.non_const_buffer_sizes) > 2,
        "MUTABLE_STATE": any(t.allocation_info is not None and t.data_buffer_idx > 0 for t in tensors),
        "PRELOAD": bool(preloadable(plan, instructions)),
        "SCALAR_INPUTS": any(not isinstance(values[i], fb.Tensor) for i in plan.inputs if 0 <= i < len(values)),
        "VALUE_LISTS": any(isinstance(v, VALUE_LIST_TYPES) for v in values),
    }
    if set(uses) != set(features.NAMES):
        raise InternalError(f"plan_features tests {sorted(uses)}; the runtime's features are {features.NAMES}")
    return {name for name, used in uses.items() if used}


def _promotes(plan: fb.ExecutionPlan, call: object) -> bool:
    """Whether a kernel call's tensor arguments are anything but all float32 or all float64."""
    if not isinstance(call, fb.KernelCall):
        return False
    args = [plan.values[i].val for i in call.args]
    types = {v.scalar_type for v in args if isinstance(v, fb.Tensor)}
    return len(types) > 1 or not types <= NATIVE_FLOATS


def program_scalar_types(program: fb.Program) -> tuple[int, ...]:
    """The ScalarType codes of every tensor value of every method, sorted."""
    return tuple(sorted({
        ev.val.scalar_type for plan in program.execution_plan for ev in plan.values if isinstance(ev.val, fb.Tensor)
    }))
