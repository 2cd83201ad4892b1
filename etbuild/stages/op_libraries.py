"""What a saved ExportedProgram needs registered before `torch.export.load` can read it in a fresh process.

`torch.export.load` looks up every operator of the graph in torch's dispatcher; an operator that a
Python library defines (ExecuTorch's `llama::update_cache` from `etbuild.llm.custom_ops`,
`quantized_decomposed::*` from torch's or torchao's quantization modules, a model's own
`torch.library` operators) exists only in a process that ran that library. So the saving stage
records, per operator namespace outside torch's own, the registrar that defines it, and the loading
stage runs those registrars first. A registrar is `module` (importing it registers) or
`module:function` (calling the function does). `LIBRARIES` names the registrars etbuild knows; any other
namespace's registrar is the Python module the dispatcher says defined its operators, when one is
imported; an operator defined from C++ (a shared library) is not recorded, and loading without it is a
StageError naming the file.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import torch
from torch.export import ExportedProgram

LIBRARIES: Mapping[str, str] = MappingProxyType({
    "llama": "etbuild.llm.custom_ops:define",  # not registered on import: executorch's library may define them
})
"""Operator namespace → the registrar that defines it, where importing the dispatcher's module is not enough."""

TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "higher_order", "_operator", "profiler"})
"""Namespaces torch defines on import."""

_REGISTERED_AT = re.compile(r"^debug: registered at (.+?\.py):\d+$", re.MULTILINE)


def namespaces(ep: ExportedProgram) -> list[str]:
    """The namespaces of the operators in every graph of `ep` (submodules too), outside torch's own, sorted."""
    found: set[str] = set()
    for module in ep.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            found.update(_namespace(node.target) for node in module.graph.nodes if node.op == "call_function")
    return sorted(found - TORCH_NAMESPACES - {""})


def _namespace(target: object) -> str:
    return target.namespace if isinstance(target, torch._ops.OpOverload) else ""


def registrars(ep: ExportedProgram) -> dict[str, str]:
    """Namespace → registrar for every namespace of `ep` whose registrar is known or found."""
    out: dict[str, str] = {}
    for namespace in namespaces(ep):
        registrar = LIBRARIES.get(namespace) or _defining_module(ep, namespace)
        if registrar is not None:
            out[namespace] = registrar
    return out


def _defining_module(ep: ExportedProgram, namespace: str) -> str | None:
    """The imported Python module that defined an operator of `namespace` in `ep`, by the dispatcher's record."""
    files = {Path(m.__file__).resolve(): name for name, m in list(sys.modules.items())
             if getattr(m, "__file__", None)}
    for module in ep.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op == "call_function" and _namespace(node.target) == namespace:
                match = _REGISTERED_AT.search(torch._C._dispatch_dump(node.target._schema.name))
                if match is not None and Path(match.group(1)).resolve() in files:
                    return files[Path(match.group(1)).resolve()]
    return None


def register(found: Mapping[str, str]) -> None:
    """Run each registrar once (import its module; call its function if it names one)."""
    for registrar in sorted(set(found.values())):
        module, _, function = registrar.partition(":")
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()
