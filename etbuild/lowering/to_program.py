"""Converts a folded core-ATen graph into an unplanned ExecutionPlan (edge dialect → program).

Takes: an ExportedProgram after `run_decompositions()` and its folded constants.
Gives: an `fb.ExecutionPlan` whose every call is an out-variant KernelCall with the
format's argument convention (every schema argument in order, defaults written out, then
the result), tensors without allocation_info (memory planning is the next stage), and one
FrameList per instruction naming the model source line and module path.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch._ops import OpOverload
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Node

from etbuild.errors import StageError
from etbuild.lowering.builder import ConstantPool, PlanBuilder
from etbuild.lowering.dtypes import scalar_type, tensor_bytes
from etbuild.lowering.out_variants import copy_variant, operator_name, out_variant
from etbuild.lowering.sources import node_frame
from etbuild.runtime.format import program as fb

_MEMORY_FORMATS = {torch.contiguous_format: 0, torch.preserve_format: 1}


class GraphConverter:
    """One method: graph nodes in, plan values and kernel calls out."""

    def __init__(self, ep: ExportedProgram, consts: dict[Node, torch.Tensor], name: str, pool: ConstantPool):
        self.ep = ep
        self.consts = consts
        self.b = PlanBuilder(name, pool)
        self.env: dict[Node, Any] = {}
        self.inputs: list[int] = []

    def convert(self) -> fb.ExecutionPlan:
        user_inputs = {s.arg.name for s in self.ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
        outputs: list[int] = []
        for node in self.ep.graph.nodes:
            if node.op == "placeholder" and node.name in user_inputs:
                self.env[node] = self.new_tensor(node.meta["val"])
                self.inputs.append(self.env[node])
            elif node.op == "placeholder" and node not in self.consts:
                raise StageError(
                    f"input {node.name} is neither a user input nor a constant (mutable state is not supported yet)"
                )
            elif node.op == "call_function" and node not in self.consts:
                self.call(node)
            elif node.op == "output":
                outputs = [self.value_of(n) for n in _flatten(node.args[0])]
        return self.b.build(self.inputs, outputs)

    def new_tensor(self, meta: Any) -> int:
        if not isinstance(meta, torch.Tensor):
            raise StageError(f"expected a tensor, got {type(meta).__name__}")
        return self.b.tensor(scalar_type(meta.dtype), list(meta.shape))

    def value_of(self, node: Node) -> int:
        """The tensor value for a node, materializing a constant on first use."""
        if node not in self.env:
            if node not in self.consts:
                raise StageError(f"node {node.name} is used before it is defined")
            t = self.consts[node].contiguous()
            self.env[node] = self.b.tensor(scalar_type(t.dtype), list(t.shape), data=tensor_bytes(t))
        value = self.env[node]
        if isinstance(value, list):
            raise StageError(f"node {node.name} has several results; expected one tensor")
        return value

    def call(self, node: Node) -> None:
        if node.target is operator.getitem:
            self.env[node] = self.env[node.args[0]][node.args[1]]
            return
        if not isinstance(node.target, OpOverload):
            raise StageError(f"node {node.name}: {node.target} is not an ATen operator")
        op = out_variant(copy_variant(node.target))
        bound = _bind_args(node)
        args, outs = [], []
        for arg in op._schema.arguments:
            if arg.is_out:
                outs.append(arg)
            else:
                args.append(self.arg_value(bound.get(arg.name, _default(arg)), arg.type, node))
        out_ids, ret = self.out_values(outs, node)
        name, overload = operator_name(op)
        self.b.kernel_call(name, overload, [*args, *out_ids, ret], node_frame(node))

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
            return self.b.null()
        if isinstance(typ, torch._C.OptionalType):
            typ = typ.getElementType()
        if isinstance(value, Node):
            return self.value_of(value)
        if isinstance(typ, torch._C.TensorType):
            return self.scalar_tensor(value)
        if isinstance(value, (list, tuple)):
            return self.list_value(list(value), typ.getElementType(), node)
        return self.scalar_value(value, node)

    def scalar_value(self, value: Any, node: Node) -> int:
        if isinstance(value, torch.dtype):
            return self.b.int(scalar_type(value))
        if isinstance(value, torch.memory_format):
            return self.b.int(_MEMORY_FORMATS.get(value, 0))
        if isinstance(value, (torch.layout, torch.device)):
            return self.b.null()
        if isinstance(value, bool):
            return self.b.bool(value)
        if isinstance(value, int):
            return self.b.int(value)
        if isinstance(value, float):
            return self.b.double(value)
        if isinstance(value, str):
            return self.b.string(value)
        raise StageError(f"node {node.name}: cannot store argument {value!r} of type {type(value).__name__}")

    def scalar_tensor(self, value: Any) -> int:
        """A Python number where the schema wants a tensor becomes a 0-d constant."""
        t = torch.tensor(value)
        return self.b.tensor(scalar_type(t.dtype), [], data=tensor_bytes(t))

    def list_value(self, items: list[Any], elem: Any, node: Node) -> int:
        if isinstance(elem, torch._C.OptionalType) and isinstance(elem.getElementType(), torch._C.TensorType):
            return self.b.optional_tensor_list([self.value_of(i) if i is not None else -1 for i in items])
        if isinstance(elem, torch._C.TensorType):
            return self.b.tensor_list([self.value_of(i) for i in items])
        if isinstance(elem, torch._C.FloatType):
            return self.b.double_list(items)
        if isinstance(elem, torch._C.BoolType):
            return self.b.bool_list(items)
        return self.b.int_list([self.value_of(i) if isinstance(i, Node) else self.b.int(i) for i in items])


def _bind_args(node: Node) -> dict[str, Any]:
    schema = node.target._schema
    bound = dict(zip([a.name for a in schema.arguments], node.args))
    bound.update(node.kwargs)
    return bound


def _default(arg: Any) -> Any:
    return arg.default_value if arg.has_default_value() else None


def _flatten(x: Any) -> list[Node]:
    if isinstance(x, (list, tuple)):
        return [n for item in x for n in _flatten(item)]
    if not isinstance(x, Node):
        raise StageError(f"model output {x!r} is not a tensor computed by the graph")
    return [x]
