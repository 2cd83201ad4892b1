"""Constants that a graph writes in place become the buffers they are (run by export, before saving).

torch.export lifts a tensor it reaches through an attribute of a plain Python object (not a
module) as a constant, even when that tensor is a registered buffer under another name:
transformers' `StaticCache` layers hold the KV cache tensors that
`TorchExportableModuleWithStaticCache` also registers as `key_cache_<i>`/`value_cache_<i>`.
The graph then writes (`index_copy_`, `copy_`) into a constant, which torch cannot functionalize
(`run_decompositions` fails with "expected compiled_fn to be GraphModule"), and tracing has left
the real tensors non-leaf views (`grad_fn` set), which `copy.deepcopy` refuses. Program state
must be a buffer, so each written constant is replaced by the buffer it aliases (same storage,
shape and strides), or, aliasing none, becomes a buffer of its own; every non-parameter tensor
of the program is detached. Non-strict tracing also runs those writes on the real tensors, so
`snapshot_tensors` keeps the values of the tensors a model reaches through plain objects before
export, and the state starts from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
from torch.fx import Node

MemoryKey = tuple[int, int, tuple[int, ...]]
"""A tensor's memory: its storage's address, its offset in it and its shape."""

DEPTH = 4
"""How many plain objects deep `snapshot_tensors` looks (transformers: module → cache → layers → layer → keys)."""


def snapshot_tensors(model: torch.nn.Module) -> dict[MemoryKey, torch.Tensor]:
    """A copy of every tensor the modules of `model` reach through plain attributes (not parameters or
    buffers, which export does not write), by memory."""
    found: dict[MemoryKey, torch.Tensor] = {}
    seen: set[int] = set()
    for module in model.modules():
        for name, value in vars(module).items():
            if name not in ("_parameters", "_buffers", "_modules"):
                _collect(value, DEPTH, found, seen)
    return found


def _collect(value: Any, depth: int, found: dict[MemoryKey, torch.Tensor], seen: set[int]) -> None:
    if id(value) in seen or depth < 0 or isinstance(value, torch.nn.Module | str | bytes | int | float | type):
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        found[_key(value)] = value.detach().clone()
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, depth - 1, found, seen)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, depth - 1, found, seen)
    elif hasattr(value, "__dict__") and not callable(value):
        for item in vars(value).values():
            _collect(item, depth - 1, found, seen)


def _key(tensor: torch.Tensor) -> MemoryKey:
    return tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape)


def constants_to_state(ep: ExportedProgram, initial: Mapping[MemoryKey, torch.Tensor]) -> ExportedProgram:
    """`ep` with each constant the graph writes in place made a buffer, every tensor detached (in place).

    `initial` (from `snapshot_tensors` before export) gives such a constant its value before tracing wrote it.
    """
    placeholders = {node.name: node for node in ep.graph.nodes if node.op == "placeholder"}
    buffers = {spec.target: placeholders[spec.arg.name] for spec in ep.graph_signature.input_specs
               if spec.kind == InputKind.BUFFER and spec.target is not None}
    specs = []
    for spec in ep.graph_signature.input_specs:
        node = placeholders.get(spec.arg.name) if isinstance(spec.arg, TensorArgument) else None
        if spec.kind != InputKind.CONSTANT_TENSOR or node is None or not _written(node):
            specs.append(spec)
            continue
        value = ep.constants[spec.target]
        if _key(value) in initial:
            with torch.no_grad():
                value.copy_(initial[_key(value)])  # the aliased buffer shares this memory: restored too
        alias = next((name for name in buffers if _same_memory(_tensor(ep, name), value)), None)
        if alias is not None:
            node.replace_all_uses_with(buffers[alias])
            ep.graph.erase_node(node)
            del ep._constants[spec.target]
        else:
            ep._state_dict[spec.target] = ep._constants.pop(spec.target).detach().clone()
            specs.append(InputSpec(InputKind.BUFFER, spec.arg, spec.target, persistent=True))
    ep.graph_signature.input_specs[:] = specs
    _detach(ep)
    ep.graph_module.recompile()
    return ep


def _written(node: Node) -> bool:
    """Whether some call takes `node` as an argument its schema marks as written (`Tensor(a!)`)."""
    for user in node.users:
        schema = getattr(user.target, "_schema", None)
        if schema is None:
            continue
        for index, argument in enumerate(schema.arguments):
            value = user.args[index] if index < len(user.args) else user.kwargs.get(argument.name)
            if value is node and argument.alias_info is not None and argument.alias_info.is_write:
                return True
    return False


def _tensor(ep: ExportedProgram, name: str) -> torch.Tensor:
    """A buffer's value: persistent ones are in the state dict, the others among the constants."""
    return cast(torch.Tensor, ep.state_dict[name] if name in ep.state_dict else ep.constants[name])


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            and a.storage_offset() == b.storage_offset() and a.shape == b.shape and a.stride() == b.stride())


def _detach(ep: ExportedProgram) -> None:
    """Every tensor but the parameters becomes a leaf without autograd history."""
    for table in (ep._state_dict, ep._constants):
        for name, value in table.items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) and value.requires_grad:
                table[name] = value.detach()
