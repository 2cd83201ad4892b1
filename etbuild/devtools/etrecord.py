"""The ETRecord of a build (`build/<recipe>/etrecord.bin`), made while the lower stage runs.

`EtrecordCapture` watches the lowering steps: after the last step before fuse-batch-norm (the
first that adds tensor constants torch cannot serialize) it serializes each method's graph
(every call, to be delegated or not, with its `nn_module_stack` and `stack_trace`;
etbuild.devtools.etrecord_graph numbers the calls with debug handles), and after the last
graph step it notes which calls each delegate runs. Calls a later step makes anew (an int8
embedding fused into `embedding_byte`) are not in that graph, so their instructions map to no
handle. Given
the lowered program, `records` maps each instruction to the handles of what it computes: a
kernel call to the node whose value it writes (from the debug map), a delegate call to the
nodes of its partition. ExecuTorch's emitter makes the same maps for its programs. Two kinds of
kernel call no graph call makes get the handle of the call they serve: the `aten::copy_` that
writes a mutated buffer back, the node whose value it copies (the one the buffer mutation
records); an instruction inside a `torch.cond` branch, the cond call (the Inspector walks only
the top graph, not the branch subgraphs, so it could not name a branch's own nodes). Inside a
delegate, the delegate map maps each id the backend's runtimes profile a node by (its
preprocess's `Processed.debug_map`: for XNNPACK `node 3 (Conv2d)` in our runtime and
`Convolution (NHWC, F32) IGEMM #1` in ExecuTorch's, etbuild.backends.xnnpack.aot.debug) to the
handles of the calls that node lowers, so the Inspector names the backend's own events too.
(ExecuTorch's own XNNPACK preprocess returns an empty map: on its programs those events name
no operator.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from etbuild.devtools.etrecord_format import Handles, MethodRecord
from etbuild.devtools.etrecord_graph import SerializedGraph, serialize_graph
from etbuild.lowering.forms import GraphProgram, LoweredProgram
from etbuild.lowering.partition import Delegate
from etbuild.lowering.steps import Step
from etbuild.runtime.format import program as fb


class EtrecordCapture:
    """The `after` hook of the lowering (see the module docstring): `graph_after` names the step
    after which the graphs are serialized, `delegates_after` the one after which delegates are read."""

    def __init__(self, graph_after: str, delegates_after: str) -> None:
        self.graph_after, self.delegates_after = graph_after, delegates_after
        self.graphs: dict[str, SerializedGraph] = {}
        self.delegates: dict[str, list[Delegate]] = {}

    def __call__(self, step: Step, form: Any) -> None:
        if step.name == self.graph_after and isinstance(form, GraphProgram):
            self.graphs = {m.name: serialize_graph(m.exported) for m in form.methods}
        if step.name == self.delegates_after and isinstance(form, GraphProgram):
            self.delegates = {m.name: [m.exported.graph_module.get_submodule(str(n.target))
                                       for n in m.exported.graph.nodes if n.op == "call_module"]
                              for m in form.methods}

    def records(self, lowered: LoweredProgram) -> dict[str, MethodRecord]:
        """Each method's ETRecord entries, for the lowered program the captured steps led to."""
        out = {}
        for plan in lowered.program.execution_plan:
            name = plan.name or ""
            graph = self.graphs[name]
            debug = {i: s.node for i, s in lowered.debug.get(name, {}).items()}
            out[name] = method_record(plan, graph, debug, self.delegates.get(name, []))
        return out


def method_record(plan: fb.ExecutionPlan, graph: SerializedGraph, debug: Mapping[int, str],
                  delegates: Sequence[Delegate]) -> MethodRecord:
    """The instruction maps of one method: `debug` maps value index → node name, `delegates` are
    the plan's delegates in order."""
    handles: dict[int, Handles] = {}
    mapped: dict[int, dict[str, Any]] = {}
    outs: dict[int, int] = {}
    instructions = plan.chains[0].instructions if plan.chains else []
    named = {v: graph.handles[n] for v, n in debug.items() if n in graph.handles}  # value -> its call's handle
    inherited = {**_branch_handles(instructions, named), **_write_back_handles(plan, named)}
    for k, ins in enumerate(instructions):
        call = ins.instr_args
        if isinstance(call, fb.KernelCall) and call.args:
            found = sorted({named[v] for v in _results(plan, call.args[-1]) if v in named})
            found = found or ([inherited[k]] if k in inherited else [])
            if found:
                handles[k], outs[k] = found[0] if len(found) == 1 else found, 1
        elif isinstance(call, fb.DelegateCall) and call.delegate_index < len(delegates):
            d = delegates[call.delegate_index]
            handles[k] = [graph.handles[n] for n in d.node_names if n in graph.handles]
            mapped[k] = {"name": d.backend_id, "delegate_map": node_handles(d.processed.debug_map, graph)}
            outs[k] = d.output_count
    return MethodRecord((graph.program, graph.state_dict, graph.constants, graph.example_inputs),
                        handles, mapped, outs)


def node_handles(debug_map: Mapping[str, Sequence[str]], graph: SerializedGraph) -> dict[str, Handles]:
    """A delegate's node ids → the handles of the calls each lowers (one handle: an int, as
    ExecuTorch writes them); ids whose calls are all missing from the graph are left out."""
    out: dict[str, Handles] = {}
    for ident, names in debug_map.items():
        found = sorted({graph.handles[n] for n in names if n in graph.handles})
        if found:
            out[ident] = found[0] if len(found) == 1 else found
    return out


def _results(plan: fb.ExecutionPlan, value: int) -> list[int]:
    """The values a kernel call writes: its result, or a list result's items."""
    v = plan.values[value].val if 0 <= value < len(plan.values) else None
    return list(v.items) if isinstance(v, fb.TensorList) else [value]


def _write_back_handles(plan: fb.ExecutionPlan, named: Mapping[int, int]) -> dict[int, int]:
    """Each `aten::copy_` that writes a mutated buffer back (`copy_(buffer, value)`, which no graph call
    makes) → the handle of the call whose value it copies: the node the buffer mutation records."""
    out = {}
    for k, ins in enumerate(plan.chains[0].instructions if plan.chains else []):
        call = ins.instr_args
        if (isinstance(call, fb.KernelCall) and len(call.args) > 1 and 0 <= call.op_index < len(plan.operators)
                and plan.operators[call.op_index].name == "aten::copy_" and call.args[1] in named):
            out[k] = named[call.args[1]]
    return out


def _branch_handles(instructions: Sequence[fb.Instruction], named: Mapping[int, int]) -> dict[int, int]:
    """Each instruction inside a `torch.cond` branch → the handle of the cond call (the call whose values the
    branch's moves write; the Inspector walks no branch subgraph). A branch is the span a forward
    JumpFalse skips (the true branch, then the jump over the false one); an inner cond's span, whose
    moves write values of no call of the graph, keeps the outer cond's handle."""
    spans = [(j, a.destination_instruction) for j, ins in enumerate(instructions)
             if isinstance(a := ins.instr_args, fb.JumpFalseCall) and j + 1 < a.destination_instruction]
    out: dict[int, int] = {}
    for start, end in sorted(spans, key=lambda s: s[0] - s[1]):  # the widest first: inner spans override
        found = [named[i.instr_args.move_to] for i in instructions[start + 1:end]
                 if isinstance(i.instr_args, fb.MoveCall) and i.instr_args.move_to in named]
        if found:
            out.update(dict.fromkeys(range(start + 1, min(end, len(instructions))), found[0]))
    return out
