"""Builds one XNNPACK graph value by value and node by node, with its weights as named data.

Values are numbered in creation order (`id_out` is the index in `xvalues`). A constant is
stored once per distinct content, as ExecuTorch stores them: in the program's named data
under the lowercase hex sha256 of its bytes (`scale_` + that for per-channel scales), and
the graph's `constant_data` entry k (k >= 1; entry 0 means "not a constant") names that key.
External values (the delegate's arguments) are marked when the graph is finished: inputs
first, then outputs, external id = position in the DelegateCall's arguments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.errors import InternalError

NAMED_DATA_ALIGNMENT = 128  # ExecuTorch's runtime packs named data from 128-aligned segments


class DynamicSize(int):
    """A size that varies at run time (a symbolic size of the export), held at its upper bound.

    Values keep it at the bound (XNNPACK resizes them per call from the external inputs); a
    StaticReshape writes 0 for it (XNNPACK infers that dim). A product or quotient with a static
    size stays dynamic, so dims computed from a dynamic shape keep the mark."""

    def __mul__(self, other: object) -> DynamicSize:
        return DynamicSize(int(self) * int(other))  # type: ignore[call-overload]

    __rmul__ = __mul__

    def __floordiv__(self, other: object) -> DynamicSize:
        return DynamicSize(int(self) // int(other))  # type: ignore[call-overload]


def is_dynamic(size: object) -> bool:
    return isinstance(size, DynamicSize)


@dataclass
class GraphBuilder:
    """The graph under construction and the named data its constants live in."""

    graph: g.XNNGraph = field(default_factory=lambda: g.XNNGraph(
        version="0", constant_data=[g.ConstantDataOffset(0, 0, "")]))
    named_data: dict[str, bytes] = field(default_factory=dict)
    producers: dict[int, g.XNode] = field(default_factory=dict)
    handle: int = 0  # the debug handle new nodes get: 1 + the index of the partition call being lowered
    _keys: dict[str, int] = field(default_factory=dict)
    _dynamic_dims: dict[int, tuple[int, ...]] = field(default_factory=dict)  # values with a DynamicSize

    def tensor(self, dims: Sequence[int], datatype: int = g.XNNDatatype.FP32,
               quant: g.QuantParams | None = None, constant: int = 0) -> int:
        """A new value; quantized when `quant` is given. Returns its id."""
        vid = len(self.graph.xvalues)
        if any(is_dynamic(d) for d in dims):
            self._dynamic_dims[vid] = tuple(dims)
        t = g.TensorValue(datatype=datatype, num_dims=len(dims), dims=[int(d) for d in dims],
                          constant_buffer_idx=constant, external_id=g.NO_ID, flags=0, id_out=vid)
        value = t if quant is None else g.QuantizedTensorValue(tensor_value=t, quant_params=quant)
        self.graph.xvalues.append(g.XValue(value))
        return vid

    def constant_data(self, data: bytes, prefix: str = "") -> int:
        """The constant_data index of these bytes, stored once under `prefix + sha256`."""
        key = prefix + hashlib.sha256(data).hexdigest()
        if key not in self._keys:
            self.named_data[key] = data
            self.graph.constant_data.append(g.ConstantDataOffset(g.NAMED_OFFSET, len(data), key))
            self._keys[key] = len(self.graph.constant_data) - 1
        return self._keys[key]

    def constant(self, array: np.ndarray, datatype: int = g.XNNDatatype.FP32,
                 quant: g.QuantParams | None = None, dims: Sequence[int] | None = None) -> int:
        """A constant value holding `array` (little-endian, C order) with `dims` (default: its shape)."""
        data = np.ascontiguousarray(array).tobytes()
        return self.tensor(array.shape if dims is None else dims, datatype, quant, self.constant_data(data))

    def node(self, body: g.NodeBody, output: int, min_max: tuple[float, float] | None = None) -> g.XNode:
        """Append a node computing value `output`, marked with the current `handle`."""
        bounds = None if min_max is None else g.OutputMinMax(float(min_max[0]), float(min_max[1]))
        xnode = g.XNode(body, self.handle, bounds)
        self.graph.xnodes.append(xnode)
        self.producers[output] = xnode
        return xnode

    def unary(self, kind: str, source: int, dims: Sequence[int], min_max: tuple[float, float] | None = None,
              datatype: int = g.XNNDatatype.FP32, quant: g.QuantParams | None = None) -> int:
        """A new value computed by a one-input node of union member `kind` (Sigmoid, Convert, ...)."""
        out = self.tensor(dims, datatype, quant)
        self.node(g.MEMBER_TYPES[kind](input_id=source, output_id=out, flags=0), out, min_max)
        return out

    def binary(self, kind: str, a: int, b: int, dims: Sequence[int], min_max: tuple[float, float] | None = None,
               flags: int = 0, datatype: int = g.XNNDatatype.FP32, quant: g.QuantParams | None = None) -> int:
        out = self.tensor(dims, datatype, quant)
        self.node(g.MEMBER_TYPES[kind](input1_id=a, input2_id=b, output_id=out, flags=flags), out, min_max)
        return out

    def reshape(self, source: int, dims: Sequence[int]) -> int:
        """A StaticReshape of `source` to `dims`: a dynamic size is written 0 (inferred at run
        time, as ExecuTorch writes torch's -1), so at most one may vary."""
        if sum(map(is_dynamic, dims)) > 1 or (any(map(is_dynamic, self.dims(source))) and
                                              not any(map(is_dynamic, dims))):
            raise InternalError(f"reshape of {list(self.dims(source))} to {list(dims)}: XNNPACK infers one "
                                "dynamic dim only, and a dynamic value's reshape needs one")
        out = self.tensor(dims, *self.kind(source))
        self.node(g.StaticReshape(len(dims), [0 if is_dynamic(d) else int(d) for d in dims], source, out, 0), out)
        return out

    def transpose(self, source: int, perm: Sequence[int], dims: Sequence[int]) -> int:
        out = self.tensor(dims, *self.kind(source))
        self.node(g.StaticTranspose(len(perm), [int(p) for p in perm], source, out, 0), out)
        return out

    def copy(self, source: int) -> int:
        out = self.tensor(self.dims(source), *self.kind(source))
        self.node(g.MEMBER_TYPES["Copy"](input_id=source, output_id=out, flags=0), out)
        return out

    def tensor_value(self, vid: int) -> g.TensorValue:
        value = self.graph.xvalues[vid].value
        return value.tensor_value if isinstance(value, g.QuantizedTensorValue) else value  # type: ignore[return-value]

    def dims(self, vid: int) -> tuple[int, ...]:
        """A value's dims (a DynamicSize where they vary at run time)."""
        return self._dynamic_dims.get(vid) or tuple(self.tensor_value(vid).dims)

    def kind(self, vid: int) -> tuple[int, g.QuantParams | None]:
        """The datatype and quantization of a value, for a value holding the same numbers."""
        value = self.graph.xvalues[vid].value
        quant = value.quant_params if isinstance(value, g.QuantizedTensorValue) else None
        return self.tensor_value(vid).datatype, quant

    def is_computed(self, vid: int) -> bool:
        """A value some node of the graph writes (not an external input, not a constant)."""
        t = self.tensor_value(vid)
        return vid in self.producers and t.constant_buffer_idx == 0 and not t.flags

    def finish(self, inputs: Sequence[int], outputs: Sequence[int]) -> g.XNNGraph:
        """Mark the externals (inputs, then outputs, by argument position) and return the graph."""
        for k, vid in enumerate([*inputs, *outputs]):
            t = self.tensor_value(vid)
            t.external_id = k
            t.flags = g.FLAG_EXTERNAL_INPUT if k < len(inputs) else g.FLAG_EXTERNAL_OUTPUT
        self.graph.input_ids = list(inputs)
        self.graph.output_ids = list(outputs)
        self.graph.num_externs = len(inputs) + len(outputs)
        return self.graph
