"""Test support: XNNPACK delegate graphs built by hand with our mirror types and blob writer.

No executorch needed: the malformed-blob and runtime unit tests build small graphs here and
run them through our backend directly, or inside a one-delegate `.pte` made with our program
writer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.blob import write_blob
from etbuild.backends.xnnpack.runtime import BACKEND
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import write_program

DT = g.XNNDatatype


@dataclass
class GraphBuilder:
    """Values, nodes and named constants of one delegate graph."""

    values: list[g.XValue] = field(default_factory=list)
    nodes: list[g.XNode] = field(default_factory=list)
    constants: list[g.ConstantDataOffset] = field(default_factory=lambda: [g.ConstantDataOffset(0, 0, "")])
    named: dict[str, bytes] = field(default_factory=dict)
    externs: int = 0

    def tensor(self, dims: tuple[int, ...], datatype: int = DT.FP32, data: np.ndarray | None = None,
               flags: int = 0, quant: Any = None) -> int:
        """A value; external when flags is set (ids in call order), constant when data is given."""
        vid = len(self.values)
        external = g.NO_ID
        if flags:
            external, self.externs = self.externs, self.externs + 1
        tv = g.TensorValue(datatype, len(dims), list(dims), self.constant(data) if data is not None else 0,
                           external, flags, vid)
        self.values.append(g.XValue(tv if quant is None else g.QuantizedTensorValue(tv, quant)))
        return vid

    def constant(self, data: np.ndarray) -> int:
        raw = np.ascontiguousarray(data).tobytes()
        key = hashlib.sha256(raw).hexdigest()
        self.named[key] = raw
        self.constants.append(g.ConstantDataOffset(g.NAMED_OFFSET, len(raw), key))
        return len(self.constants) - 1

    def node(self, member: str, clamp: tuple[float, float] | None = None, **fields: Any) -> None:
        body = (g.MEMBER_TYPES.get(member) or g.TABLE_TYPES[member])(**fields)
        self.nodes.append(g.XNode(body, len(self.nodes), g.OutputMinMax(*clamp) if clamp else None))

    def graph(self) -> g.XNNGraph:
        ins = [xv_id(v) for v in self.values if flags(v) & g.FLAG_EXTERNAL_INPUT]
        outs = [xv_id(v) for v in self.values if flags(v) & g.FLAG_EXTERNAL_OUTPUT]
        return g.XNNGraph("0", self.nodes, self.values, self.externs, ins, outs, [], self.constants)

    def blob(self) -> bytes:
        return write_blob(self.graph())

    def handle(self) -> Any:
        """Our backend's handle for this graph."""
        return BACKEND.init(memoryview(self.blob()), {}, {k: memoryview(v) for k, v in self.named.items()})

    def pte(self, arg_values: list[fb.Tensor], backend_id: str = "XnnpackBackend") -> bytes:
        """A one-method program calling this graph as its only delegate on the given tensors (inputs first)."""
        n_in = sum(1 for v in self.values if flags(v) & g.FLAG_EXTERNAL_INPUT)
        offset = 0
        values = []
        for t in arg_values:
            nbytes = int(np.prod(t.sizes)) * 4
            t.allocation_info = fb.AllocationDetails(1, offset, 0)
            t.dim_order = bytes(range(len(t.sizes)))
            values.append(fb.EValue(t))
            offset += -(-nbytes // 16) * 16
        plan = fb.ExecutionPlan(
            name="forward", values=values, inputs=list(range(n_in)), outputs=list(range(n_in, len(values))),
            chains=[fb.Chain(instructions=[fb.Instruction(fb.DelegateCall(0, list(range(len(values)))))])],
            delegates=[fb.BackendDelegate(backend_id, fb.BackendDelegateDataReference(fb.DataLocation.SEGMENT, 1))],
            non_const_buffer_sizes=[0, offset],
        )
        segments = [b"", self.blob(), *self.named.values()]
        named = [fb.NamedData(k, 2 + i) for i, k in enumerate(self.named)]
        program = fb.Program(execution_plan=[plan], constant_segment=fb.SubsegmentOffsets(0, [0]), named_data=named)
        return write_program(program, segments)


def xv_id(v: g.XValue) -> int:
    return tensor_value(v).id_out


def flags(v: g.XValue) -> int:
    return tensor_value(v).flags


def tensor_value(v: g.XValue) -> g.TensorValue:
    return v.value.tensor_value if isinstance(v.value, g.QuantizedTensorValue) else v.value


def float_tensor(*sizes: int) -> fb.Tensor:
    return fb.Tensor(scalar_type=fb.ScalarType.FLOAT, sizes=list(sizes))


def fc_graph(k: int = 4, n: int = 3, rows: int = 2, seed: int = 0) -> tuple[GraphBuilder, np.ndarray, np.ndarray]:
    """x [rows, k] → FullyConnected(w [n, k], b [n]) → Clamp ReLU → out: the graph, w and b."""
    rng = np.random.default_rng(seed)
    w, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    gb = GraphBuilder()
    x = gb.tensor((rows, k), flags=g.FLAG_EXTERNAL_INPUT)
    wid, bid = gb.tensor((n, k), data=w), gb.tensor((n,), data=b)
    out = gb.tensor((rows, n), flags=g.FLAG_EXTERNAL_OUTPUT)
    gb.node("FullyConnected", clamp=(0.0, float("inf")), input1_id=x, filter_id=wid, bias_id=bid, output_id=out)
    return gb, w, b
