"""Readable text of a lowering form, for `etbuild build --dump-after STEP`.

A graph form lists each method's FX graph as `print_readable` code (shapes and source lines
as comments) after a comment naming the nodes folded into constants. A program lists, per
method, every value and every instruction with the source it came from:

    method forward: 2 instructions, inputs v0, outputs v6
      values:
        v0    tensor float32[2, 6]
        v1    tensor float32[4] constant 1
        …
      instructions:
        0     aten::addmm.out(v1, v0, v2, v3, v4, v5) -> v5    from 0 (Linear) at torch/nn/modules/linear.py:134: …
"""

from __future__ import annotations

from typing import Any

from etbuild.errors import InternalError
from etbuild.lowering.forms import GraphProgram, LoweredProgram
from etbuild.lowering.locations import SourceLocation
from etbuild.runtime.format import program as fb
from etbuild.runtime.tensor import numpy_dtype


def listing(form: Any) -> str:
    """The text of a GraphProgram or a LoweredProgram."""
    if isinstance(form, GraphProgram):
        return "\n\n".join(_graph_method(m.name, m.exported, m.constants) for m in form.methods)
    if isinstance(form, LoweredProgram):
        return program_listing(form.program)
    raise InternalError(f"no listing for a {type(form).__name__}: a lowering step gave a form listing.py does not know")


def _graph_method(name: str, exported: Any, constants: Any) -> str:
    folded = [n for n in exported.graph.nodes if n in constants and n.op != "placeholder"]
    head = f"# method {name}: {len(folded)} node(s) folded to constants at build time"
    lines = [head, *(f"#   {n.name}: {_tensor_text(constants[n])}" for n in folded)]
    return "\n".join([*lines, exported.graph_module.print_readable(print_output=False)])


def _tensor_text(t: Any) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def program_listing(program: fb.Program) -> str:
    """Every method's values and instructions, one per line."""
    return "\n\n".join(_method(plan) for plan in program.execution_plan)


def _method(plan: fb.ExecutionPlan) -> str:
    chain = plan.chains[0] if plan.chains else fb.Chain()
    refs = ", ".join
    lines = [f"method {plan.name}: {len(chain.instructions)} instructions, "
             f"inputs {refs(map(_ref, plan.inputs)) or '-'}, outputs {refs(map(_ref, plan.outputs)) or '-'}"]
    lines += ["  values:", *(f"    {_ref(i):<5} {_value(ev.val)}" for i, ev in enumerate(plan.values))]
    lines.append("  instructions:")
    frames = chain.stacktrace or []
    for pc, ins in enumerate(chain.instructions):
        where = frames[pc].items[0] if pc < len(frames) and frames[pc].items else None
        source = f"    from {SourceLocation.from_frame(where).describe()}" if where else ""
        lines.append(f"    {pc:<5} {_instruction(plan, ins.instr_args)}{source}")
    return "\n".join(lines)


def _ref(i: int) -> str:
    return f"v{i}" if i >= 0 else "-"


def _value(v: Any) -> str:
    if isinstance(v, fb.Tensor):
        return _tensor(v)
    if isinstance(v, (fb.TensorList, fb.OptionalTensorList)):
        return f"{type(v).__name__} [{', '.join(map(_ref, v.items))}]"
    if isinstance(v, (fb.IntList, fb.DoubleList, fb.BoolList)):
        return f"{type(v).__name__} {list(v.items)}"
    for kind, attr in ((fb.Int, "int_val"), (fb.Bool, "bool_val"), (fb.Double, "double_val"),
                       (fb.String, "string_val")):
        if isinstance(v, kind):
            return f"{kind.__name__} {getattr(v, attr)!r}"
    return "None"


def _tensor(t: fb.Tensor) -> str:
    text = f"tensor {numpy_dtype(t.scalar_type)}{list(t.sizes)}"
    if t.shape_dynamism:
        text += " dynamic-bound"
    extra = t.extra_tensor_info
    if extra is not None and extra.fully_qualified_name:
        state = f"initial state {t.data_buffer_idx}" if t.data_buffer_idx else "zeros"
        return f"{text} mutable {extra.fully_qualified_name} ({state})"
    if t.data_buffer_idx:
        return f"{text} constant {t.data_buffer_idx}"
    if t.allocation_info is not None:
        a = t.allocation_info
        return f"{text} at memory {a.memory_id} offset {a.memory_offset_low + (a.memory_offset_high << 32)}"
    return text


def _instruction(plan: fb.ExecutionPlan, call: Any) -> str:
    if isinstance(call, fb.KernelCall):
        op = plan.operators[call.op_index]
        name = f"{op.name}.{op.overload}" if op.overload else str(op.name)
        return f"{name}({', '.join(map(_ref, call.args[:-1]))}) -> {_ref(call.args[-1])}" if call.args else name
    if isinstance(call, fb.DelegateCall):
        return f"delegate {plan.delegates[call.delegate_index].id}({', '.join(map(_ref, call.args))})"
    if isinstance(call, fb.MoveCall):
        return f"move {_ref(call.move_from)} -> {_ref(call.move_to)}"
    if isinstance(call, fb.JumpFalseCall):
        return f"jump to {call.destination_instruction} if not {_ref(call.cond_value_index)}"
    if isinstance(call, fb.FreeCall):
        return f"free {_ref(call.value_index)}"
    return type(call).__name__
