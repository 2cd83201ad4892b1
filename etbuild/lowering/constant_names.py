"""The key each constant of a lowered program is known by, for weights kept apart (`.ptd`).

A parameter or buffer used as it is keeps its fully qualified name in the exported program
(`lin.weight`), the key ExecuTorch writes. A constant that folding computed (a transposed or
quantized weight) or a lifted tensor has no name of its own: its key is the name of the first
parameter it is computed from (else the module that uses it, else `constant`) with `#` and a
digest of its type, shape and bytes, so equal values get equal keys in every recipe and values
that differ never share one.
"""

from __future__ import annotations

import hashlib
from collections import deque

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from etbuild.lowering.sources import module_of

DIGEST_CHARS = 16


def constant_key(ep: ExportedProgram, node: Node, tensor: torch.Tensor, data: bytes) -> str:
    """The key of the constant `node` holds (`tensor`, stored as `data`)."""
    named = _names(ep)
    if node.op == "placeholder" and node.name in named:
        return named[node.name]
    digest = hashlib.sha256(f"{tensor.dtype}{list(tensor.shape)}".encode() + data).hexdigest()[:DIGEST_CHARS]
    return f"{_origin(node, named)}#{digest}"


def _names(ep: ExportedProgram) -> dict[str, str]:
    """Placeholder name -> the parameter's or buffer's fully qualified name."""
    sig = ep.graph_signature
    return {**sig.inputs_to_parameters, **sig.inputs_to_buffers}


def _origin(node: Node, named: dict[str, str]) -> str:
    """The first named parameter a folded value is computed from (breadth first), else its user's module."""
    queue, seen = deque([node]), {node}
    while queue:
        current = queue.popleft()
        if current.op == "placeholder" and current.name in named:
            return named[current.name]
        for arg in current.all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                queue.append(arg)
    for user in node.users:
        path, _ = module_of(user)
        if path and path != "<root>":
            return path
    return "constant"
