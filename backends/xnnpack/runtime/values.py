"""The values of a delegate graph, checked: datatype, dims, quantization, external ids, constants.

Every check a malformed blob could fail raises InvalidProgram naming the value. Constants are
decoded into the runtime's working form (float32 real numbers, or int32): fp32 weights are
zero-copy views of the program's named data; quantized ones are dequantized with their
per-tensor, per-channel or per-block scales. A 2-D weight quantized along its rows (int8 or
int4, per channel or per block) is kept as its stored integers and scales (`RowWeight`): its
float32 form (`Value.constant`) and its integer codes transposed (`Value.rows`, the form a one-row
float product reads fastest) are made when an op asks, so a product that packs its own form (the
qd8 × int4 one) holds nothing else: a 4-bit weight's float32 form is 8× its bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.runtime.grids import QUANT_RANGES, Grid
from etbuild.errors import InvalidProgram

MAX_RANK = 6  # XNN_MAX_TENSOR_DIMS
MAX_EXTERNS = 4096
MAX_ELEMENTS = 1 << 31

# How each datatype is stored in memory outside the delegate (and in constant data).
STORAGE = {
    DT.FP32: np.dtype(np.float32), DT.FP16: np.dtype(np.float16), DT.BF16: np.dtype(np.uint16),
    DT.QINT8: np.dtype(np.int8), DT.QUINT8: np.dtype(np.uint8), DT.QINT32: np.dtype(np.int32),
    DT.QCINT8: np.dtype(np.int8), DT.QCINT32: np.dtype(np.int32), DT.QDINT8: np.dtype(np.int8),
    DT.INT32: np.dtype(np.int32), DT.QCINT4: np.dtype(np.uint8), DT.QBINT4: np.dtype(np.uint8),
}
PER_TENSOR = (DT.QINT8, DT.QUINT8, DT.QINT32)
PER_CHANNEL = (DT.QCINT8, DT.QCINT32, DT.QCINT4)
FOUR_BIT = (DT.QCINT4, DT.QBINT4)
NAMES = {v: k.lower() for k, v in vars(DT).items() if not k.startswith("_")}


@dataclass(frozen=True)
class IntegerCodes:
    """A quantized constant as XNNPACK's integer kernels read it: its stored integers (a view of the
    blob), their zero point, and the scale of each index along `axis` (float32; one scale: axis None)."""

    ints: np.ndarray
    zero_point: int
    scales: np.ndarray
    axis: int | None

    def relative(self) -> np.ndarray:
        """The integers minus the zero point, as float64 (exact)."""
        return self.ints.astype(np.float64) - self.zero_point


@dataclass(frozen=True)
class QuantizedRows:
    """A [out, in] weight as integers: codes transposed to (in, out) int8, scales (blocks, out) float32,
    the in channels in blocks of in / blocks (one block: per channel)."""

    codes: np.ndarray
    scales: np.ndarray


@dataclass(frozen=True)
class RowWeight:
    """A 2-D [out, in] weight quantized along dim 0 (int8 or int4; one scale per output, or per block of inputs),
    as stored: its bytes (a view of the program's data: int8 codes, or uint8 holding two 4-bit codes) and scales
    (blocks, out) float32. Each form below is a new array on every call: an op keeps the one it uses."""

    stored: np.ndarray
    dims: tuple[int, int]
    scales: np.ndarray

    def ints(self, first: int = 0, last: int | None = None) -> np.ndarray:
        """The integer codes [out, in] as int8 (4-bit ones unpacked: even index in the low nibble, zero point 8),
        of outputs first … last − 1 (all by default)."""
        out, inp = self.dims
        last = out if last is None else last
        if self.stored.dtype == np.int8:
            return self.stored.reshape(self.dims)[first:last]
        start, stop = first * inp, last * inp  # nibble positions
        nibbles = _unpacked(self.stored[start // 2 : (stop + 1) // 2], 2 * ((stop + 1) // 2 - start // 2))
        return nibbles[start % 2 : start % 2 + stop - start].reshape(last - first, inp)

    def dequantized(self) -> np.ndarray:
        """The float32 [out, in] real numbers: each code times its block's scale."""
        out, inp = self.dims
        blocks = self.scales.shape[0]
        codes = self.ints().astype(np.float32).reshape(out, blocks, inp // blocks)
        return (codes * self.scales.T.reshape(out, blocks, 1)).reshape(out, inp)

    def rows(self) -> QuantizedRows:
        """The codes transposed to (in, out) int8 with the scales."""
        return QuantizedRows(np.ascontiguousarray(self.ints().T), self.scales)


@dataclass
class Value:
    """One checked value: id, datatype, dims, its grid (for computed values) and constant data."""

    id: int
    datatype: int
    dims: tuple[int, ...]
    grid: Grid
    data: np.ndarray | None = None  # a constant in working form: float32 real numbers, or int32
    weight: RowWeight | None = None  # a constant 2-D weight quantized along dim 0, its forms made on demand
    codes: IntegerCodes | None = None  # an int8 / int32 constant's integers and scales (see IntegerCodes)
    external_id: int | None = None
    flags: int = 0

    @property
    def is_constant(self) -> bool:
        return self.data is not None or self.weight is not None

    @property
    def constant(self) -> np.ndarray | None:
        """The constant in working form (a RowWeight's dequantized anew each call), or None for a computed value."""
        return self.weight.dequantized() if self.weight is not None else self.data

    @property
    def rows(self) -> QuantizedRows | None:
        """A weight quantized along dim 0 as integer codes (in, out) and scales (a new array each call); else None."""
        return self.weight.rows() if self.weight is not None else None

    @property
    def is_input(self) -> bool:
        return bool(self.flags & g.FLAG_EXTERNAL_INPUT)

    @property
    def is_output(self) -> bool:
        return bool(self.flags & g.FLAG_EXTERNAL_OUTPUT)

    @property
    def working(self) -> np.dtype:
        """The numpy dtype the runtime holds this value in."""
        return np.dtype(np.int32) if self.datatype == DT.INT32 else np.dtype(np.float32)

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype of the value outside the delegate."""
        return STORAGE[self.datatype]

    def describe(self) -> str:
        return f"value {self.id} ({NAMES.get(self.datatype, self.datatype)} {list(self.dims)})"


class ConstantSource:
    """Where constant bytes come from: named data, the blob's constant region, or legacy buffers."""

    def __init__(self, graph: g.XNNGraph, region: memoryview, named: Mapping[str, memoryview]) -> None:
        self.entries = graph.constant_data
        self.buffers = graph.constant_buffer
        self.region = region
        self.named = named

    def bytes(self, idx: int, nbytes: int, where: str) -> memoryview:
        """The nbytes of constant entry idx (idx > 0), checked."""
        data = self._entry(idx, where)
        if len(data) < nbytes:
            raise InvalidProgram(f"{where}: constant {idx} holds {len(data)} bytes, {nbytes} are needed")
        return data[:nbytes]

    def _entry(self, idx: int, where: str) -> memoryview:
        if not self.entries and self.buffers:  # legacy: constants inside the FlatBuffer
            if not 0 < idx < len(self.buffers):
                raise InvalidProgram(f"{where}: constant buffer {idx} does not exist ({len(self.buffers)} buffers)")
            return memoryview(self.buffers[idx].storage).cast("B")
        if not 0 < idx < len(self.entries):
            raise InvalidProgram(f"{where}: constant {idx} does not exist ({len(self.entries)} entries)")
        entry = self.entries[idx]
        if entry.named_key:
            if entry.named_key not in self.named:
                raise InvalidProgram(f"{where}: named data {entry.named_key!r} is not in the program")
            return self.named[entry.named_key]
        if entry.offset > len(self.region) or entry.size > len(self.region) - entry.offset:
            raise InvalidProgram(
                f"{where}: constant {idx} ({entry.size} bytes at {entry.offset}) lies outside the "
                f"{len(self.region)}-byte constant region"
            )
        return self.region[entry.offset : entry.offset + entry.size]


def read_values(graph: g.XNNGraph, constants: ConstantSource) -> dict[int, Value]:
    """Every value of the graph by id, checked; InvalidProgram for the first that is malformed."""
    if graph.num_externs > MAX_EXTERNS:
        raise InvalidProgram(f"num_externs {graph.num_externs} exceeds {MAX_EXTERNS}")
    values: dict[int, Value] = {}
    externs: set[int] = set()
    for k, xv in enumerate(graph.xvalues):
        value = _read_value(xv, k, graph.num_externs, constants)
        if value.id in values:
            raise InvalidProgram(f"xvalues[{k}]: id {value.id} is defined twice")
        if value.external_id is not None:
            if value.external_id in externs:
                raise InvalidProgram(f"{value.describe()}: external id {value.external_id} is used twice")
            externs.add(value.external_id)
        values[value.id] = value
    return values


def _read_value(xv: g.XValue, k: int, num_externs: int, constants: ConstantSource) -> Value:
    body = xv.value
    quant = None
    if isinstance(body, g.QuantizedTensorValue):
        quant, body = body.quant_params, body.tensor_value
    if not isinstance(body, g.TensorValue):
        raise InvalidProgram(f"xvalues[{k}]: not a tensor value")
    where = f"value {body.id_out}"
    dims = _dims(body, where)
    if body.datatype not in STORAGE:
        raise InvalidProgram(f"{where}: datatype {NAMES.get(body.datatype, body.datatype)} is not supported")
    value = Value(body.id_out, body.datatype, dims, Grid(body.datatype))
    _external(value, body, num_externs, where)
    if body.dq_datatype != DT.INVALID:
        _legacy_dynamic(value, body, where)
    if body.constant_buffer_idx and value.external_id is not None:
        raise InvalidProgram(f"{where}: a value cannot be both external and constant")
    _quantization(value, quant, constants, body.constant_buffer_idx, where)
    if body.constant_buffer_idx and not value.is_constant:
        value.data = _plain_constant(value, constants.bytes(body.constant_buffer_idx, _nbytes(value), where))
    return value


def _dims(body: g.TensorValue, where: str) -> tuple[int, ...]:
    dims = tuple(int(d) for d in body.dims)
    if body.num_dims != len(dims):
        raise InvalidProgram(f"{where}: num_dims {body.num_dims} but {len(dims)} dims")
    if len(dims) > MAX_RANK:
        raise InvalidProgram(f"{where}: rank {len(dims)} exceeds {MAX_RANK}")
    if math.prod(dims) > MAX_ELEMENTS:
        raise InvalidProgram(f"{where}: dims {list(dims)} hold more than {MAX_ELEMENTS} elements")
    return dims


def _external(value: Value, body: g.TensorValue, num_externs: int, where: str) -> None:
    flags = body.flags
    if flags & ~(g.FLAG_EXTERNAL_INPUT | g.FLAG_EXTERNAL_OUTPUT):
        raise InvalidProgram(f"{where}: flags {flags:#x} have bits other than external input (1) and output (2)")
    if flags == g.FLAG_EXTERNAL_INPUT | g.FLAG_EXTERNAL_OUTPUT:
        raise InvalidProgram(f"{where}: a value cannot be both an external input and an external output")
    if body.external_id == g.NO_ID:
        if flags:
            raise InvalidProgram(f"{where}: flags {flags} mark it external but it has no external id")
        return
    if not flags:
        raise InvalidProgram(f"{where}: external id {body.external_id} but neither input nor output flag")
    if body.external_id >= num_externs:
        raise InvalidProgram(f"{where}: external id {body.external_id} is not below num_externs {num_externs}")
    value.external_id, value.flags = body.external_id, flags


def _legacy_dynamic(value: Value, body: g.TensorValue, where: str) -> None:
    """dq_datatype qint8 on an fp32 external input: the graph sees its per-row quantization."""
    if body.dq_datatype != DT.QINT8 or body.datatype != DT.FP32 or not value.is_input:
        raise InvalidProgram(f"{where}: dq_datatype {body.dq_datatype} is only allowed as qint8 on an fp32 input")
    value.grid = Grid(DT.QDINT8, row_dims=1)


def _nbytes(value: Value) -> int:
    count = math.prod(value.dims)
    if value.datatype in FOUR_BIT:
        return (count + 1) // 2
    return count * value.storage.itemsize


def _plain_constant(value: Value, raw: memoryview) -> np.ndarray:
    """A constant of a datatype without quantization parameters, in working form."""
    if value.datatype not in (DT.FP32, DT.FP16, DT.BF16, DT.INT32):
        raise InvalidProgram(f"{value.describe()}: a constant of this datatype needs quantization parameters")
    data = np.frombuffer(raw, dtype=value.storage).reshape(value.dims)
    if value.datatype == DT.BF16:
        return (data.astype(np.uint32) << 16).view(np.float32)
    return data if value.datatype in (DT.FP32, DT.INT32) else data.astype(np.float32)


def _quantization(value: Value, quant: object, constants: ConstantSource, idx: int, where: str) -> None:
    dt = value.datatype
    expected = {**dict.fromkeys(PER_TENSOR, g.PerTensorQuant), **dict.fromkeys(PER_CHANNEL, g.PerChannelQuant),
                DT.QDINT8: g.PerTokenDynamicQuant, DT.QBINT4: g.PerChannelGroupQuant}.get(dt)
    if expected is None:
        if quant is not None:
            raise InvalidProgram(f"{where}: datatype {NAMES[dt]} takes no quantization parameters")
        return
    if not isinstance(quant, expected):
        found = type(quant).__name__ if quant is not None else "none"
        raise InvalidProgram(f"{where}: datatype {NAMES[dt]} needs {expected.__name__} parameters, found {found}")
    if isinstance(quant, g.PerTensorQuant):
        _per_tensor(value, quant, constants, idx, where)
    elif isinstance(quant, g.PerChannelQuant):
        _per_channel(value, quant, constants, idx, where)
    elif isinstance(quant, g.PerChannelGroupQuant):
        _per_block(value, quant, constants, idx, where)
    else:
        _per_token(value, quant, idx, where)


def _check_scales(scales: np.ndarray, where: str) -> np.ndarray:
    if not np.all(np.isfinite(scales)) or np.any(scales <= 0):
        raise InvalidProgram(f"{where}: quantization scales must be positive and finite")
    return scales.astype(np.float32)


def _per_tensor(value: Value, q: g.PerTensorQuant, constants: ConstantSource, idx: int, where: str) -> None:
    lo, hi = QUANT_RANGES[value.datatype]
    _check_scales(np.array([q.scale]), where)
    if not lo <= q.zero_point <= hi:
        raise InvalidProgram(f"{where}: zero point {q.zero_point} is outside [{lo}, {hi}]")
    value.grid = Grid(value.datatype, float(np.float32(q.scale)), int(q.zero_point))
    if idx:
        raw = np.frombuffer(constants.bytes(idx, _nbytes(value), where), dtype=value.storage)
        deq = (raw.astype(np.float32) - np.float32(q.zero_point)) * np.float32(q.scale)
        value.data = deq.reshape(value.dims)
        value.codes = IntegerCodes(raw.reshape(value.dims), int(q.zero_point), np.array([q.scale], np.float32), None)


def _scales(q: g.PerChannelQuant | g.PerChannelGroupQuant, constants: ConstantSource, count: int,
            where: str, bf16: bool) -> np.ndarray:
    """The scales, from constant data (fp32, or bf16 for blocks) or inline fp32."""
    if q.num_scales != count and q.scale_buffer_idx:
        raise InvalidProgram(f"{where}: num_scales {q.num_scales}, expected {count}")
    if not q.scale_buffer_idx:
        if len(q.scale) != count:
            raise InvalidProgram(f"{where}: {len(q.scale)} inline scales, expected {count}")
        return _check_scales(np.asarray(q.scale, dtype=np.float32), where)
    dtype = np.dtype(np.uint16) if bf16 else np.dtype(np.float32)
    raw = np.frombuffer(constants.bytes(q.scale_buffer_idx, count * dtype.itemsize, where), dtype=dtype)
    scales = (raw.astype(np.uint32) << 16).view(np.float32) if bf16 else raw
    return _check_scales(scales, where)


def _per_channel(value: Value, q: g.PerChannelQuant, constants: ConstantSource, idx: int, where: str) -> None:
    if not idx:
        raise InvalidProgram(f"{where}: per-channel quantized values must be constants")
    if not 0 <= q.channel_dim < len(value.dims):
        raise InvalidProgram(f"{where}: channel_dim {q.channel_dim} is not a dim of {list(value.dims)}")
    scales = _scales(q, constants, value.dims[q.channel_dim], where, bf16=False)
    raw = constants.bytes(idx, _nbytes(value), where)
    if len(value.dims) == 2 and q.channel_dim == 0 and value.datatype in (DT.QCINT8, DT.QCINT4):
        value.weight = _stored_weight(value, raw, scales.reshape(1, -1))
        if value.datatype == DT.QCINT8:  # what the int8 product reads (ops/requant.py): a view of the blob
            value.codes = IntegerCodes(value.weight.ints(), 0, scales, q.channel_dim)
        return
    ints = _int_codes(value, raw)
    value.codes = IntegerCodes(ints, 0, scales, q.channel_dim)
    shape = [1] * len(value.dims)
    shape[q.channel_dim] = -1
    value.data = ints.astype(np.float32) * scales.reshape(shape)


def _int_codes(value: Value, raw: memoryview) -> np.ndarray:
    """The integer codes of a quantized constant (4-bit: two per byte, zero point 8, as int8)."""
    if value.datatype in FOUR_BIT:
        return _unpacked(np.frombuffer(raw, dtype=np.uint8), math.prod(value.dims)).reshape(value.dims)
    return np.frombuffer(raw, dtype=value.storage).reshape(value.dims)


def _unpacked(packed: np.ndarray, count: int) -> np.ndarray:
    """`count` 4-bit codes stored two to a byte (even index in the low nibble, zero point 8) as int8."""
    nibbles = np.empty(2 * packed.size, dtype=np.int8)
    nibbles[0::2] = packed & 0x0F
    nibbles[1::2] = packed >> 4
    return nibbles[:count] - 8


def _stored_weight(value: Value, raw: memoryview, scales: np.ndarray) -> RowWeight:
    """A 2-D weight's stored bytes (no copy) and its scales (blocks, out) as a RowWeight."""
    stored = np.frombuffer(raw, dtype=np.uint8 if value.datatype in FOUR_BIT else np.int8)
    return RowWeight(stored, (value.dims[0], value.dims[1]), scales)


def _per_block(value: Value, q: g.PerChannelGroupQuant, constants: ConstantSource, idx: int, where: str) -> None:
    if not idx or len(value.dims) != 2 or q.channel_dim != 0:
        raise InvalidProgram(f"{where}: block-quantized values must be constant 2-D weights quantized along dim 0")
    out, inp = value.dims
    if q.group_size <= 0 or inp % q.group_size:
        raise InvalidProgram(f"{where}: group_size {q.group_size} does not divide {inp} input channels")
    blocks = inp // q.group_size
    scales = _scales(q, constants, out * blocks, where, bf16=bool(q.scale_buffer_idx))
    if not q.scale_buffer_idx:  # inline fp32 scales become bf16 as ExecuTorch's runtime makes them
        scales = ((scales * np.float32(1.00389105)).view(np.uint32) >> 16 << 16).view(np.float32)
    raw = constants.bytes(idx, _nbytes(value), where)
    value.weight = _stored_weight(value, raw, np.ascontiguousarray(scales.reshape(out, blocks).T))


def _per_token(value: Value, q: g.PerTokenDynamicQuant, idx: int, where: str) -> None:
    if idx or value.external_id is not None:
        raise InvalidProgram(f"{where}: a dynamically quantized value must be internal and not constant")
    if not 1 <= q.num_nonbatch_dims <= max(1, len(value.dims)):
        raise InvalidProgram(f"{where}: num_nonbatch_dims {q.num_nonbatch_dims} does not fit rank {len(value.dims)}")
    value.grid = Grid(DT.QDINT8, row_dims=q.num_nonbatch_dims)
