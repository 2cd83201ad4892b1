"""Converts folded core-ATen graphs into an unplanned program (the to-program lowering step).

Takes: a GraphProgram in core ATen with its folded constants. Gives: a LoweredProgram whose
methods share one constant segment (and one mutable-state segment), with its debug map (which
node each value holds, see etbuild.lowering.debug_map). In each ExecutionPlan
every call is an out-variant KernelCall with the format's argument convention (every schema
argument in order, defaults written out, then the result), tensors have no allocation_info
(memory planning is the next stage), and one FrameList per instruction names the model
source line and module path. Beyond plain calls it lowers: `torch.cond` (both branches
inlined between JumpFalse/Move instructions), symbolic sizes (`sym_size.int` and prim ops on
Int values; tensors planned at their upper bound as DYNAMIC_BOUND), and mutable buffers
(planned, initial state in the mutable data segment, written back by `aten::copy_` at the
end of the method).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch._ops import HigherOrderOperator, OpOverload
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import Graph, Node

from etbuild.errors import StageError
from etbuild.lowering.builder import ConstantPool, DelegateData, PlanBuilder
from etbuild.lowering.constant_names import constant_key
from etbuild.lowering.debug_map import value_sources
from etbuild.lowering.dtypes import scalar_type, tensor_bytes
from etbuild.lowering.forms import GraphMethod, GraphProgram, LoweredProgram
from etbuild.lowering.operator_set import returns_scalar
from etbuild.lowering.out_variants import check_carried, copy_variant, operator_name, out_schema
from etbuild.lowering.partition import Delegate
from etbuild.lowering.quantized_ops import ProgramOp
from etbuild.lowering.sources import node_frame
from etbuild.lowering.steps import at_node, in_method
from etbuild.lowering.symbolic import PRIM_OPS, shape_bounds
from etbuild.runtime.format import program as fb

_MEMORY_FORMATS = {torch.contiguous_format: 0, torch.preserve_format: 1}


def to_program(graph: GraphProgram) -> LoweredProgram:
    """Every method converted, with the segments they share: constants, mutable state, then
    each delegate's blob and the named data the delegates keep their weights in."""
    pool, mutable, delegated = ConstantPool(), ConstantPool(), DelegateData()
    plans, debug, names = [], {}, {}
    for method in graph.methods:
        with in_method(method.name):
            converter = GraphConverter(method, pool, mutable, delegated)
            plans.append(converter.convert())
            debug[method.name] = value_sources(method.exported.graph, converter.env)
            names[method.name] = converter.names
    data, offsets = pool.segment()
    program = fb.Program(
        version=0, execution_plan=plans, constant_segment=fb.SubsegmentOffsets(segment_index=0, offsets=offsets)
    )
    segments = [data]
    if mutable.blobs:
        state, state_offsets = mutable.segment()
        program.mutable_data_segments = [fb.SubsegmentOffsets(segment_index=1, offsets=state_offsets)]
        segments.append(state)
    segments += delegated.place(program, len(segments))
    return LoweredProgram(program, tuple(segments), debug, graph.report, names)


class GraphConverter:
    """One method: graph nodes in, plan values and instructions out."""

    def __init__(self, method: GraphMethod, pool: ConstantPool, mutable_pool: ConstantPool,
                 delegated: DelegateData) -> None:
        self.ep = method.exported
        self.consts = method.constants
        self.b = PlanBuilder(method.name, pool)
        self.mutable_pool = mutable_pool
        self.delegated = delegated
        self.env: dict[Node, Any] = {}
        self.names: dict[int, str] = {}  # constant value -> its key (etbuild.lowering.constant_names)

    def convert(self) -> fb.ExecutionPlan:
        sig = self.ep.graph_signature
        kinds = {s.arg.name: s for s in sig.input_specs}
        inputs = []
        for node in self.ep.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = kinds[node.name]
            with at_node(node):
                if spec.kind == InputKind.USER_INPUT:
                    self.env[node] = self.new_tensor(node.meta["val"])
                    inputs.append(self.env[node])
                elif node not in self.consts:
                    self.env[node] = self.mutable_buffer(node, spec.target)
        results = self.convert_graph(self.ep.graph)
        outputs = self.write_back(results)
        return self.b.build(inputs, outputs)

    def convert_graph(self, graph: Graph) -> list[Any]:
        """Emit every call of a graph; return its output values (nodes are looked up in env)."""
        for node in graph.nodes:
            with at_node(node):
                if node.op == "call_function" and node not in self.consts:
                    self.call(node)
                elif node.op == "call_module":
                    self.delegate(node)
                elif node.op == "output":
                    return [self.value_of(n) if isinstance(n, Node) else n for n in _flatten(node.args[0])]
        return []

    def mutable_buffer(self, node: Node, target: str | None) -> int:
        """A buffer the model mutates: planned, with its initial state in the mutable segment
        unless that state is all zeros, which the runtimes' zero-filled arenas already hold (as
        ExecuTorch's default export leaves a KV cache: stored, it would grow the file by the cache)."""
        state = self.ep.state_dict.get(target) if target in self.ep.state_dict else self.ep.constants.get(target)
        if state is None:
            raise StageError(f"input {node.name} is neither a user input, a constant nor a known buffer")
        sizes, _ = shape_bounds(node.meta["val"])
        data = tensor_bytes(state)
        idx = self.mutable_pool.add(data) if data.count(0) < len(data) else 0
        extra = fb.ExtraTensorInfo(mutable_data_segments_idx=0, fully_qualified_name=target)
        return self.b.add(fb.Tensor(
            scalar_type=scalar_type(state.dtype), sizes=sizes, dim_order=bytes(range(len(sizes))),
            data_buffer_idx=idx, extra_tensor_info=extra,
        ))

    def write_back(self, results: list[Any]) -> list[int]:
        """Copy each mutated buffer's new value into it; return the user outputs."""
        outputs = []
        for spec, value in zip(self.ep.graph_signature.output_specs, results):
            if spec.kind == OutputKind.BUFFER_MUTATION:
                buf = self.env[next(n for n in self.ep.graph.nodes if n.name == _input_for(self.ep, spec.target))]
                if value == buf:  # written in place by a call (`Tensor(a!)`): nothing to copy
                    continue
                self.b.kernel_call("aten::copy_", "", [buf, value, self.b.bool_value(False), buf], None)
            elif spec.kind == OutputKind.USER_OUTPUT:
                outputs.append(value)
            else:
                raise StageError(f"output kind {spec.kind.name} is not supported")
        return outputs

    def new_tensor(self, meta: Any) -> int:
        if not isinstance(meta, torch.Tensor):
            raise StageError(f"expected a tensor, got {type(meta).__name__}")
        sizes, dynamic = shape_bounds(meta)
        return self.b.tensor(scalar_type(meta.dtype), sizes, dynamic=dynamic)

    def value_of(self, node: Node) -> int:
        """The value for a node, materializing a constant on first use."""
        if node not in self.env:
            if node not in self.consts:
                raise StageError(f"node {node.name} is used before it is defined")
            t = self.consts[node].contiguous()
            data = tensor_bytes(t)
            self.env[node] = self.b.tensor(scalar_type(t.dtype), list(t.shape), data=data)
            self.names[self.env[node]] = constant_key(self.ep, node, t, data)
        value = self.env[node]
        if isinstance(value, list):
            raise StageError(f"node {node.name} has several results; expected one value")
        return value

    def call(self, node: Node) -> None:
        target = node.target
        if target is operator.getitem:
            self.env[node] = self.env[_arg_node(node, 0)][_arg_int(node, 1)]
        elif target in PRIM_OPS:
            self.prim_call(node, PRIM_OPS[target])
        elif target is torch.ops.higher_order.cond:
            self.cond(node)
        elif isinstance(target, OpOverload) and returns_scalar(target):
            self.scalar_call(node, target)
        elif isinstance(target, OpOverload):
            self.kernel(node, out_schema(copy_variant(target)))
        elif isinstance(target, ProgramOp):
            self.kernel(node, target.schema)
        elif isinstance(target, HigherOrderOperator):
            raise StageError(f"{target.name()} is not supported yet")
        else:
            raise StageError(f"{target} is not an ATen operator")

    def prim_call(self, node: Node, name: str) -> None:
        args = [self.value_of(a) if isinstance(a, Node) else self.scalar_value(a) for a in node.args]
        self.env[node] = self.scalar_result(node)
        self.b.kernel_call(name, "Scalar", [*args, self.env[node]], node_frame(node))

    def scalar_call(self, node: Node, op: OpOverload) -> None:
        """An operator whose result is a scalar (`sym_size.int`, `_local_scalar_dense`), called as it is."""
        bound = _bind_args(node, op)
        args = [self.arg_value(bound.get(a.name, _default(a)), a.type, node) for a in op._schema.arguments]
        self.env[node] = self.scalar_result(node)
        self.b.kernel_call(*operator_name(op), [*args, self.env[node]], node_frame(node))

    def scalar_result(self, node: Node) -> int:
        """A fresh Bool, Double or Int value for the scalar a call writes (by the node's traced value)."""
        result = node.meta.get("val")
        if isinstance(result, (bool, torch.SymBool)):
            return self.b.add(fb.Bool(False))
        if isinstance(result, (float, torch.SymFloat)):
            return self.b.add(fb.Double(0.0))
        return self.b.add(fb.Int(0))

    def kernel(self, node: Node, schema: torch._C.FunctionSchema) -> None:
        """A call of the out-variant `schema` with the node's arguments and fresh out tensors."""
        bound = _bind_args(node, node.target)
        check_carried(bound, schema, node.meta.get("val"))
        args, outs = [], []
        for arg in schema.arguments:
            if arg.is_out:
                outs.append(arg)
            else:
                args.append(self.arg_value(bound.get(arg.name, _default(arg)), arg.type, node))
        out_ids, ret = self.out_values(outs, node)
        self.b.kernel_call(schema.name, schema.overload_name, [*args, *out_ids, ret], node_frame(node))

    def delegate(self, node: Node) -> None:
        """A partition's delegate: its blob in a segment, one DelegateCall (inputs, then outputs)."""
        module = self.ep.graph_module.get_submodule(str(node.target))
        if not isinstance(module, Delegate):
            raise StageError(f"module {node.target} is not a delegate")
        inputs = [self.value_of(_arg_node(node, i)) for i in range(len(node.args))]
        outputs = [self.new_tensor(m) for m in node.meta["val"]]
        self.env[node] = outputs
        processed = module.processed
        ref = self.delegated.add(processed.blob, processed.named_data)
        specs = [fb.CompileSpec(key, value) for key, value in processed.compile_specs]
        delegate = fb.BackendDelegate(id=module.backend_id, processed=ref, compile_specs=specs)
        self.b.delegate_call(delegate, [*inputs, *outputs], node_frame(node))

    def cond(self, node: Node) -> None:
        """Inline both branches: JumpFalse, true branch, Move, jump to end, false branch, Move."""
        pred, true_gm, false_gm = (_arg_node(node, i) for i in range(3))
        operands = node.args[3]
        outs = [self.new_tensor(m) for m in node.meta["val"]]
        jump_to_false = self.b.jump_false(self.value_of(pred))
        self.branch(self.submodule(true_gm), operands, outs)
        jump_to_end = self.b.jump_false(self.b.bool_value(False))
        self.b.patch_jump(jump_to_false)
        self.branch(self.submodule(false_gm), operands, outs)
        self.b.patch_jump(jump_to_end)
        self.env[node] = outs

    def submodule(self, node: Node) -> torch.fx.GraphModule:
        """The graph module a `get_attr` node names (a branch of torch.cond)."""
        return getattr(self.ep.graph_module, str(node.target))

    def branch(self, gm: torch.fx.GraphModule, operands: Any, outs: list[int]) -> None:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for ph, operand in zip(placeholders, operands):
            self.env[ph] = self.value_of(operand)
        for result, out in zip(self.convert_graph(gm.graph), outs):
            self.b.move(result, out)

    def out_values(self, outs: list[Any], node: Node) -> tuple[list[int], int]:
        meta = node.meta["val"]
        if len(outs) == 1 and isinstance(outs[0].type, torch._C.ListType):
            items = [self.new_tensor(m) for m in meta]
            self.env[node] = items
            return [self.b.tensor_list(items)], self.b.tensor_list(items)
        if len(outs) == 1:
            out = self.new_tensor(meta)
            self.env[node] = out
            return [out], out
        ids = [self.new_tensor(m) for m in meta]
        self.env[node] = ids
        return ids, self.b.tensor_list(ids)

    def arg_value(self, value: Any, typ: Any, node: Node) -> int:
        """The value index for one argument, converted by its schema type."""
        if value is None:
            return self.b.null_value()
        if isinstance(typ, torch._C.OptionalType):
            typ = typ.getElementType()
        if isinstance(value, Node):
            if isinstance(typ, torch._C.TensorType) and not isinstance(value.meta.get("val"), torch.Tensor):
                return self.symbolic_scalar_tensor(value, node)
            return self.value_of(value)
        if isinstance(typ, torch._C.TensorType):
            return self.scalar_tensor(value)
        if isinstance(value, (list, tuple)):
            return self.list_value(list(value), typ.getElementType())
        return self.scalar_value(value)

    def scalar_value(self, value: Any) -> int:
        if isinstance(value, torch.dtype):
            return self.b.int_value(scalar_type(value))
        if isinstance(value, torch.memory_format):
            return self.b.int_value(_MEMORY_FORMATS.get(value, 0))
        if isinstance(value, (torch.layout, torch.device)):
            return self.b.null_value()
        if isinstance(value, bool):
            return self.b.bool_value(value)
        if isinstance(value, int):
            return self.b.int_value(value)
        if isinstance(value, float):
            return self.b.double_value(value)
        if isinstance(value, str):
            return self.b.string_value(value)
        raise StageError(f"cannot store argument {value!r} of type {type(value).__name__}")

    def scalar_tensor(self, value: Any) -> int:
        """A Python number where the schema wants a tensor becomes a 0-d constant."""
        t = torch.tensor(value)
        return self.b.tensor(scalar_type(t.dtype), [], data=tensor_bytes(t))

    def symbolic_scalar_tensor(self, value: Node, node: Node) -> int:
        """A scalar computed at run time where the schema wants a tensor: `scalar_tensor.out`, a 0-d
        int64, float64 or bool tensor as torch wraps a Python number of that kind."""
        kind = value.meta.get("val")
        dtype = torch.int64
        if isinstance(kind, (float, torch.SymFloat)):
            dtype = torch.float64
        elif isinstance(kind, (bool, torch.SymBool)):
            dtype = torch.bool
        out = self.b.tensor(scalar_type(dtype), [])
        self.b.kernel_call("aten::scalar_tensor", "out", [self.value_of(value), out, out], node_frame(node))
        return out

    def list_value(self, items: list[Any], elem: Any) -> int:
        if isinstance(elem, torch._C.OptionalType) and isinstance(elem.getElementType(), torch._C.TensorType):
            return self.b.optional_tensor_list([self.value_of(i) if i is not None else -1 for i in items])
        if isinstance(elem, torch._C.TensorType):
            return self.b.tensor_list([self.value_of(i) for i in items])
        if isinstance(elem, torch._C.FloatType):
            return self.b.double_list(items)
        if isinstance(elem, torch._C.BoolType):
            return self.b.bool_list(items)
        return self.b.int_list([self.value_of(i) if isinstance(i, Node) else self.b.int_value(i) for i in items])


def _input_for(ep: ExportedProgram, buffer: str | None) -> str:
    for node_name, target in ep.graph_signature.inputs_to_buffers.items():
        if target == buffer:
            return node_name
    raise StageError(f"mutated buffer {buffer} is not an input of the graph")


def _arg_node(node: Node, i: int) -> Node:
    """Argument i of a node, which must be another node (a graph value)."""
    arg = node.args[i]
    if not isinstance(arg, Node):
        raise StageError(f"argument {i} is {arg!r}; expected a value computed by the graph")
    return arg


def _arg_int(node: Node, i: int) -> int:
    """Argument i of a node, which must be a Python int."""
    arg = node.args[i]
    if not isinstance(arg, int):
        raise StageError(f"argument {i} is {arg!r}; expected an int")
    return arg


def _bind_args(node: Node, op: Any) -> dict[str, Any]:
    """The node's arguments by schema name (positional and keyword)."""
    schema = op.schema if isinstance(op, ProgramOp) else op._schema
    bound = dict(zip([a.name for a in schema.arguments], node.args))
    bound.update(node.kwargs)
    return bound


def _default(arg: Any) -> Any:
    return arg.default_value if arg.has_default_value() else None


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [n for item in x for n in _flatten(item)]
    if not isinstance(x, Node):
        raise StageError(f"model output {x!r} is not a tensor computed by the graph")
    return [x]
