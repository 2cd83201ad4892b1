"""Python types that mirror `schema/xnnpack.fbs` field for field.

Each class is one table of the schema, with the same field names in the same order, typed
(etbuild.runtime.format.mirror: the one way every schema is mirrored); an
aliased union member (`Add: BinaryNode`) is a subclass of its table's class that adds no
field, so its type says which member it is. `tests/backends/xnnpack/test_format.py` checks
the correspondence. Ids are the `id_out` of values; NO_ID marks an absent one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from etbuild.runtime.format.mirror import mirror

NO_ID = 0xFFFFFFFF  # an absent id (no bias) and the external_id of an internal value
FLAG_EXTERNAL_INPUT = 1
FLAG_EXTERNAL_OUTPUT = 2
NAMED_OFFSET = 0xFFFFFFFFFFFFFFFF  # ConstantDataOffset.offset of an entry kept in named data


class XNNDatatype:
    """XNNDatatype codes (not an Enum: values are stored as plain ints)."""

    INVALID = 0
    FP32 = 1
    FP16 = 2
    QINT8 = 3
    QUINT8 = 4
    QINT32 = 5
    QCINT8 = 6
    QCINT32 = 7
    QCINT4 = 8
    QDINT8 = 9
    QBINT4 = 10
    QPINT8 = 11
    INT32 = 12
    PFP32 = 13
    BF16 = 14


@dataclass(slots=True)
class TensorValue:
    datatype: int = 0
    num_dims: int = 0
    dims: list[int] = field(default_factory=list)
    constant_buffer_idx: int = 0
    external_id: int = 0
    flags: int = 0
    id_out: int = 0
    dq_datatype: int = 0


@dataclass(slots=True)
class PerChannelQuant:
    scale: list[float] = field(default_factory=list)
    channel_dim: int = 0
    scale_buffer_idx: int = 0
    num_scales: int = 0


@dataclass(slots=True)
class PerTensorQuant:
    scale: float = 0.0
    zero_point: int = 0


@dataclass(slots=True)
class PerTokenDynamicQuant:
    num_nonbatch_dims: int = 0


@dataclass(slots=True)
class PerChannelGroupQuant:
    scale: list[float] = field(default_factory=list)
    channel_dim: int = 0
    group_size: int = 0
    scale_buffer_idx: int = 0
    num_scales: int = 0


QuantParams = PerChannelQuant | PerTensorQuant | PerTokenDynamicQuant | PerChannelGroupQuant


@dataclass(slots=True)
class QuantizedTensorValue:
    tensor_value: TensorValue | None = None
    quant_params: QuantParams | None = None


@dataclass(slots=True)
class XValue:
    value: TensorValue | QuantizedTensorValue | None = None


@dataclass(slots=True)
class UnaryNode:
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class BinaryNode:
    input1_id: int = 0
    input2_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class FullyConnected:
    input1_id: int = 0
    filter_id: int = 0
    bias_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class Convolution:
    padding_top: int = 0
    padding_right: int = 0
    padding_bottom: int = 0
    padding_left: int = 0
    kernel_height: int = 0
    kernel_width: int = 0
    subsampling_height: int = 0
    subsampling_width: int = 0
    dilation_height: int = 0
    dilation_width: int = 0
    group_input_channels: int = 0
    group_output_channels: int = 0
    groups: int = 0
    adjustment_height: int = 0
    adjustment_width: int = 0
    input1_id: int = 0
    filter_id: int = 0
    bias_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class Pooling2d:
    padding_top: int = 0
    padding_right: int = 0
    padding_bottom: int = 0
    padding_left: int = 0
    pooling_height: int = 0
    pooling_width: int = 0
    stride_height: int = 0
    stride_width: int = 0
    dilation_height: int = 0
    dilation_width: int = 0
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class Concatenate:
    axis: int = 0
    input1_id: int = 0
    input2_id: int = 0
    input3_id: int = 0
    input4_id: int = 0
    output_id: int = 0
    flags: int = 0
    input5_id: int = 0


@dataclass(slots=True)
class StaticTranspose:
    num_dims: int = 0
    perm: list[int] = field(default_factory=list)
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class StaticResizeBilinear2D:
    new_height: int = 0
    new_width: int = 0
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class StaticConstantPad:
    pre_paddings: list[int] = field(default_factory=list)
    post_paddings: list[int] = field(default_factory=list)
    padding_value: float = 0.0
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class ELU:
    alpha: float = 0.0
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class LeakyReLU:
    negative_slope: float = 0.0
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class StaticReshape:
    num_dims: int = 0
    new_shape: list[int] = field(default_factory=list)
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class StaticSlice:
    num_dims: int = 0
    offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    input_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class ScaledDotProductAttention:
    query_id: int = 0
    key_id: int = 0
    value_id: int = 0
    scale_id: int = 0
    mask_id: int = 0
    output_id: int = 0
    flags: int = 0


@dataclass(slots=True)
class ArgMaxPooling2d:
    padding_top: int = 0
    padding_right: int = 0
    padding_bottom: int = 0
    padding_left: int = 0
    pooling_height: int = 0
    pooling_width: int = 0
    input_id: int = 0
    output_value_id: int = 0
    output_index_id: int = 0
    flags: int = 0


def _member(name: str, table: type) -> type:
    """The mirror type of an aliased union member: its table's class, renamed."""
    return dataclass(slots=True)(type(name, (table,), {"__doc__": f"A {name} node (a {table.__name__})."}))


UNARY = (
    "Softmax", "Sigmoid", "Clamp", "Floor", "Convert", "GlobalAvgPooling2d", "SquareRoot", "Ceiling", "Hardswish",
    "Negate", "Square", "Abs", "ReciprocalSquareRoot", "Log", "Gelu", "Tanh", "Exp", "Sin", "Copy", "Cos",
)
BINARY = ("Add", "Div", "Minimum", "Multiply", "Subtract", "Maximum", "PReLU", "BatchMatrixMultiply")
CONVOLUTIONS = ("Conv2d", "DepthwiseConv2d", "ConvTranspose2d")
POOLINGS = ("AvgPooling2d", "MaxPooling2d")
CONCATENATIONS = ("Concatenate2", "Concatenate3", "Concatenate4", "Concatenate5")
ALIASES: dict[str, type] = {
    **{n: UnaryNode for n in UNARY}, **{n: BinaryNode for n in BINARY}, **{n: Convolution for n in CONVOLUTIONS},
    **{n: Pooling2d for n in POOLINGS}, **{n: Concatenate for n in CONCATENATIONS},
}
MEMBER_TYPES: dict[str, type] = {name: _member(name, table) for name, table in ALIASES.items()}

NodeBody = (
    UnaryNode | BinaryNode | FullyConnected | Convolution | Pooling2d | Concatenate | StaticTranspose
    | StaticResizeBilinear2D | StaticConstantPad | ELU | LeakyReLU | StaticReshape | StaticSlice
    | ScaledDotProductAttention | ArgMaxPooling2d
)


@dataclass(slots=True)
class OutputMinMax:
    output_min: float = 0.0
    output_max: float = 0.0


@dataclass(slots=True)
class XNode:
    node: NodeBody | None = None
    debug_handle: int = 0
    output_min_max: OutputMinMax | None = None


@dataclass(slots=True)
class ConstantDataOffset:
    offset: int = 0
    size: int = 0
    named_key: str | None = None


@dataclass(slots=True)
class Buffer:
    storage: bytes = b""


@dataclass(slots=True)
class XNNGraph:
    version: str | None = None
    xnodes: list[XNode] = field(default_factory=list)
    xvalues: list[XValue] = field(default_factory=list)
    num_externs: int = 0
    input_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    constant_buffer: list[Buffer] = field(default_factory=list)
    constant_data: list[ConstantDataOffset] = field(default_factory=list)


TABLE_TYPES: dict[str, type] = mirror(
    TensorValue, PerChannelQuant, PerTensorQuant, PerTokenDynamicQuant, PerChannelGroupQuant, QuantizedTensorValue,
    XValue, UnaryNode, BinaryNode, FullyConnected, Convolution, Pooling2d, Concatenate, StaticTranspose,
    StaticResizeBilinear2D, StaticConstantPad, ELU, LeakyReLU, StaticReshape, StaticSlice, ScaledDotProductAttention,
    ArgMaxPooling2d, OutputMinMax, XNode, ConstantDataOffset, Buffer, XNNGraph,
)
MIRROR_TYPES: dict[str, type] = {**TABLE_TYPES, **MEMBER_TYPES}  # what the reader builds, by table or member name
