"""Which partition calls each XNNPACK node lowers, under the names the runtimes profile the node by.

Every node the emitter makes carries `debug_handle` = 1 + the index in the partition of the call
being lowered (a layout conversion made for a consumer: the consumer's; one made for an output:
the output's), and a clamp fused into its producer adds its own call to the producer's. The
profile events of a delegate's nodes carry no handle, only a string id (`delegate_debug_id_str`):

- our runtime (etbuild.backends.xnnpack.runtime) names node k `node k (Member)`;
- ExecuTorch's XNNPACK runtime (1.5.1, profiling on) names each XNNPACK operator it runs by its
  operator type and the count of that type in the delegate so far, `Fully Connected (NC, F32)
  GEMM #3`. On every delegate of the recipes it runs one operator per node, in node order (the
  emitter fuses clamps itself), except a Convert to qdint8 read only by fully connected nodes,
  which XNNPACK folds into them (`Fully Connected (NC, QDU8, F32, QC8W) GEMM`; read by a
  convolution it runs as `Convert (NC, F32, QDU8)`); so node k's name follows from the kinds of
  nodes 0..k.
  `operator_type` knows the types measured there (`tests/interop/test_etrecords.py` checks
  them); a delegate with a node it does not know gets no names of this kind, rather than names
  that could be counted wrong.

`debug_map` is what preprocess returns (`Processed.debug_map`): each such id → the names of the
calls the node lowers; the ETRecord writer turns the names into the graph's debug handles.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from torch.fx import Node

from etbuild.backends.xnnpack.format import graph as g

T = g.XNNDatatype
F32, QS8, QC8W, QD8, QB4W = T.FP32, T.QINT8, T.QCINT8, T.QDINT8, T.QBINT4

# Node kinds whose XNNPACK operator type does not depend on the value types (as measured).
_ANY_TYPE = {"Convert": "Convert (NC)", "StaticReshape": "Static Reshape (NC)"}
# Float nodes: the operator type when every value the node reads and writes is float32.
_FLOAT = {
    "Add": "Add (ND)", "Subtract": "Subtract (ND)", "Multiply": "Multiply (ND)", "Square": "Square (NC)",
    "ReciprocalSquareRoot": "Reciprocal Square Root (NC)", "Gelu": "GELU (NC)", "Softmax": "Softmax (NC, F32)",
    "MaxPooling2d": "Max Pooling (NHWC, F32)", "GlobalAvgPooling2d": "Mean (ND) Reduce2",
    "StaticTranspose": "Transpose (ND, X32)", "BatchMatrixMultiply": "Batch Matrix Multiply (NC, F32) GEMM",
    "Sigmoid": "Sigmoid (NC)", "Tanh": "TanH (NC)", "StaticSlice": "Slice (ND, X32)",
    "Concatenate2": "Copy (NC, X32)", "Concatenate3": "Copy (NC, X32)", "Concatenate4": "Copy (NC, X32)",
    "Concatenate5": "Copy (NC, X32)",
}
# Statically quantized nodes: the operator type when every value is qint8.
_INT8 = {"Add": "Add (ND)", "StaticTranspose": "Transpose (ND, X8)", "GlobalAvgPooling2d": "Mean (ND)"}
# Fully connected nodes by (input, filter, output) types.
_FULLY_CONNECTED = {
    (F32, F32, F32): "Fully Connected (NC, F32) GEMM",
    (QS8, QC8W, QS8): "Fully Connected (NC, QS8, QC8W) GEMM",
    (QD8, QC8W, F32): "Fully Connected (NC, QDU8, F32, QC8W) GEMM",
    (QD8, QB4W, F32): "Fully Connected (NC, QDU8, F32, QB4W) GEMM",
}
_CONVOLUTION = {  # (input, filter, output) types -> the type's data part, a 1x1 one's type, depthwise known
    (F32, F32, F32): ("F32", "Fully Connected (NC, F32) GEMM", True),
    (QS8, QC8W, QS8): ("QC8", "Fully Connected (NC, QS8, QC8W) GEMM", True),
    (QD8, QC8W, F32): ("QDU8, F32, QC8W", None, False),
}
_VALUE_FIELDS = ("input_id", "input1_id", "input2_id", "filter_id", "output_id")


def runtime_name(k: int, xnode: g.XNode) -> str:
    """Our runtime's id of node k (etbuild.backends.xnnpack.runtime.compile)."""
    return f"node {k} ({type(xnode.node).__name__ if xnode.node is not None else 'none'})"


def operator_type(xnode: g.XNode, graph: g.XNNGraph) -> str | None:
    """The type of the XNNPACK operator ExecuTorch's runtime makes of this node, '' when it makes
    none (a folded Convert), None when not known."""
    body = xnode.node
    member = type(body).__name__
    types = tuple(_datatype(graph, getattr(body, f)) for f in _VALUE_FIELDS if hasattr(body, f))
    if member == "Convert" and types[-1:] == (QD8,):
        readers = {type(x.node).__name__ for x in graph.xnodes if _reads(x, body.output_id)}
        return {frozenset({"FullyConnected"}): "", frozenset({"Conv2d"}): "Convert (NC, F32, QDU8)"}.get(
            frozenset(readers))
    if member in _ANY_TYPE:
        return _ANY_TYPE[member]
    if member == "FullyConnected":
        return _FULLY_CONNECTED.get(types)
    if member in ("Conv2d", "DepthwiseConv2d"):
        return _convolution(body, member, types)
    if types and set(types) == {F32}:
        return _FLOAT.get(member)
    return _INT8.get(member) if types and set(types) == {QS8} else None


def _reads(xnode: g.XNode, vid: int) -> bool:
    return any(getattr(xnode.node, f) == vid for f in _VALUE_FIELDS[:-1] if hasattr(xnode.node, f))


def _convolution(body: g.Convolution, member: str, types: tuple[int, ...]) -> str | None:
    if types not in _CONVOLUTION:
        return None
    data, pointwise_type, depthwise = _CONVOLUTION[types]
    pointwise = (body.kernel_height, body.kernel_width, body.subsampling_height, body.subsampling_width) == (1, 1, 1, 1)
    if member == "DepthwiseConv2d":  # a 1x1 one runs as another kind, not measured
        return f"Convolution (NHWC, {data}) DWConv" if depthwise and not pointwise else None
    unpadded = not (body.padding_top or body.padding_left or body.padding_bottom or body.padding_right)
    if pointwise and unpadded and body.groups == 1:
        return pointwise_type  # XNNPACK runs a 1x1 convolution as a matrix product
    if pointwise or body.groups != 1:
        return None
    return f"Convolution (NHWC, {data}) IGEMM"


def _datatype(graph: g.XNNGraph, vid: int) -> int:
    if not 0 <= vid < len(graph.xvalues):
        return g.XNNDatatype.INVALID
    value = graph.xvalues[vid].value
    tensor = value.tensor_value if isinstance(value, g.QuantizedTensorValue) else value
    return int(getattr(tensor, "datatype", g.XNNDatatype.INVALID))


def operator_names(graph: g.XNNGraph) -> list[str] | None:
    """ExecuTorch's runtime's event id of each node (`Transpose (ND, X32) #2`; '' for a node it
    runs no operator for); None when a node's operator type is not known (module docstring)."""
    kinds = [operator_type(x, graph) for x in graph.xnodes]
    if any(kind is None for kind in kinds):
        return None
    seen: Counter[str] = Counter()
    names = []
    for kind in kinds:
        seen[kind] += 1  # type: ignore[index]
        names.append(f"{kind} #{seen[kind]}" if kind else "")
    return names


def debug_map(graph: g.XNNGraph, calls: Sequence[Node],
              fused: Mapping[int, Sequence[int]]) -> dict[str, tuple[str, ...]]:
    """Each node's ids (ours, and ExecuTorch's where known) → the names of the calls it lowers.
    `calls` are the partition's calls (handle h is calls[h - 1]), `fused` maps id(XNode) → the
    handles of calls fused into it."""
    device = operator_names(graph) or []
    out: dict[str, tuple[str, ...]] = {}
    for k, xnode in enumerate(graph.xnodes):
        handles = [xnode.debug_handle, *fused.get(id(xnode), ())]
        names = tuple(dict.fromkeys(calls[h - 1].name for h in handles if 0 < h <= len(calls)))
        if names:
            out[runtime_name(k, xnode)] = names
            if device and device[k]:
                out[device[k]] = names
    return out
