"""Where a graph node came from: the model source line and the module path, as Frames and as text."""

from __future__ import annotations

import re

from torch.fx import Node

from etbuild.lowering.locations import SourceLocation
from etbuild.runtime.format import program as fb

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n\s*(?P<code>[^\n]*)')
MODULE_FRAME_FILE = "<module>"


def node_frame(node: Node) -> fb.Frame | None:
    """The innermost frame of the node's stack trace outside torch itself, or None."""
    frames = list(_FRAME.finditer(node.meta.get("stack_trace") or ""))
    user = [m for m in frames if "/torch/" not in m["file"]] or frames
    module = module_path(node)
    if not user:
        return fb.Frame(filename=MODULE_FRAME_FILE, lineno=0, name=module, context="")
    m = user[-1]
    return fb.Frame(filename=m["file"], lineno=int(m["line"]), name=module or m["fn"], context=m["code"].strip())


def module_of(node: Node) -> tuple[str, str]:
    """(`encoder.layers.0.attn`, `MultiheadAttention`) for the innermost module ('<root>' at the
    model itself), or ('', '') when the node records none."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    cls_name = cls.rsplit(".", 1)[-1] if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return path or "<root>", cls_name


def module_path(node: Node) -> str:
    """`encoder.layers.0.attn (MultiheadAttention)` for the innermost module, or ''."""
    path, cls = module_of(node)
    return f"{path} ({cls})" if path else ""


def node_location(node: Node) -> str:
    """`features.0 (Conv2d) at model.py:12: x = self.conv(x)`, or '' when the node records neither."""
    frame = node_frame(node)
    if frame is None or (frame.lineno <= 0 and not frame.name):
        return ""
    return SourceLocation.from_frame(frame).describe()
