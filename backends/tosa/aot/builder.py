"""A TOSA 1.0 graph as `tosa_serializer` builds it: one region and one block named `main`, unique names.

The serializer comes from tosa-tools (the `ethos-u` extra); it is imported when a builder is made, so the
backend's modules import without it. Zero points are one-element input tensors and shapes CONST_SHAPE
operands, as TOSA 1.0 has them (ARM-ETHOSU.md §4); the file says version 1.0.0, not draft, as
ExecuTorch writes it. The profile and extensions are not in the file: the `tosa_spec` compile spec says them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from etbuild.extras import require

DTYPES = {np.dtype(np.int8): "INT8", np.dtype(np.int16): "INT16", np.dtype(np.int32): "INT32",
          np.dtype(np.bool_): "BOOL"}


def serializer_module() -> Any:
    """tosa_serializer, or a UsageError naming the extra that installs it."""
    return require("tosa_serializer", "ethos-u")


class TosaBuilder:
    """Builds one TOSA graph: inputs, constants, operators and outputs, then its flatbuffer bytes."""

    def __init__(self) -> None:
        self.ts = serializer_module()
        self.graph = self.ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
        self.count = 0
        self.ops: dict[str, int] = {}

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def dtype(self, dtype: Any) -> Any:
        return getattr(self.ts.DType, DTYPES[np.dtype(dtype)])

    def input(self, shape: Sequence[int], dtype: Any) -> str:
        name = self.name("input")
        self.graph.addInputTensor(self.ts.TosaSerializerTensor(name, list(shape), self.dtype(dtype)))
        return name

    def const(self, values: np.ndarray, stem: str = "const") -> str:
        name = self.name(stem)
        values = np.ascontiguousarray(values)
        self.graph.addConst(list(values.shape), self.dtype(values.dtype), values, name=name)
        return name

    def zero_point(self, value: int, dtype: Any) -> str:
        return self.const(np.array([value], dtype=dtype), "zp")

    def shape(self, values: Sequence[int]) -> str:
        name = self.name("shape")
        self.graph.addConst([len(values)], self.ts.DType.SHAPE, [int(v) for v in values], name=name)
        return name

    def tensor(self, shape: Sequence[int], dtype: Any) -> str:
        name = self.name("t")
        self.graph.currRegion.currBasicBlock.addTensor(name, [int(s) for s in shape], self.dtype(dtype))
        return name

    def op(self, op: str, inputs: Sequence[str], shape: Sequence[int], dtype: Any, attribute: str = "",
           *args: Any) -> str:
        """Add operator `op` (a name of tosa_serializer.Op) writing a new tensor; `attribute` names the
        TosaSerializerAttribute method its `args` go to (default: `<Op>Attribute()` with none)."""
        out = self.tensor(shape, dtype)
        attr = self.ts.TosaSerializerAttribute()
        method = attribute or "".join(p.capitalize() for p in op.split("_")) + "Attribute"
        getattr(attr, method)(*args)
        self.graph.addOperator(getattr(self.ts.Op, op), list(inputs), [out], attr)
        self.ops[op] = self.ops.get(op, 0) + 1
        return out

    def output(self, name: str) -> None:
        self.graph.currRegion.currBasicBlock.addOutput(name)

    def serialize(self) -> bytes:
        return bytes(self.graph.serialize())
