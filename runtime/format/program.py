"""Python types that mirror `schema/program.fbs` field for field.

Each class is one table of the schema, with the same field names in the same order, typed, with
the schema's defaults (the one way every schema is mirrored: etbuild.runtime.format.mirror, whose
`mismatches` the tests hold these to). A union-typed field holds an
instance of one member class (or None). Vectors of `ubyte` are bytes-like objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from etbuild.runtime.format.mirror import mirror


class ScalarType:
    """ScalarType codes used in the format (not an Enum: values are stored as plain ints)."""

    BYTE = 0
    CHAR = 1
    SHORT = 2
    INT = 3
    LONG = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    UINT16 = 27
    UINT32 = 28
    UINT64 = 29


class TensorShapeDynamism:
    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2


class DataLocation:
    INLINE = 0
    SEGMENT = 1


class TensorDataLocation:
    """Where a constant tensor's bytes are: the program's constant segment, or a `.ptd` data file by key."""

    SEGMENT = 0
    EXTERNAL = 1


@dataclass(slots=True)
class ContainerMetadata:
    encoded_inp_str: str | None = None
    encoded_out_str: str | None = None


@dataclass(slots=True)
class Null:
    pass


@dataclass(slots=True)
class AllocationDetails:
    memory_id: int = 0
    memory_offset_low: int = 0
    memory_offset_high: int = 0

    @property
    def offset(self) -> int:
        """The 64-bit byte offset inside the planned buffer."""
        return self.memory_offset_low | (self.memory_offset_high << 32)


@dataclass(slots=True)
class ExtraTensorInfo:
    mutable_data_segments_idx: int = 0
    fully_qualified_name: str | None = None
    location: int = 0


@dataclass(slots=True)
class Tensor:
    scalar_type: int = 0
    storage_offset: int = 0
    sizes: list[int] = field(default_factory=list)
    dim_order: bytes = b""
    requires_grad: bool = False
    data_buffer_idx: int = 0
    allocation_info: AllocationDetails | None = None
    layout: int = 0
    shape_dynamism: int = 0
    extra_tensor_info: ExtraTensorInfo | None = None


@dataclass(slots=True)
class Int:
    int_val: int = 0


@dataclass(slots=True)
class Bool:
    bool_val: bool = False


@dataclass(slots=True)
class Double:
    double_val: float = 0.0


@dataclass(slots=True)
class String:
    string_val: str | None = None


@dataclass(slots=True)
class IntList:
    items: list[int] = field(default_factory=list)


@dataclass(slots=True)
class DoubleList:
    items: list[float] = field(default_factory=list)


@dataclass(slots=True)
class BoolList:
    items: list[bool] = field(default_factory=list)


@dataclass(slots=True)
class TensorList:
    items: list[int] = field(default_factory=list)


@dataclass(slots=True)
class OptionalTensorList:
    items: list[int] = field(default_factory=list)


KernelTypes = (
    Null | Int | Bool | Double | Tensor | String | IntList | DoubleList | BoolList | TensorList
    | OptionalTensorList
)


@dataclass(slots=True)
class EValue:
    val: KernelTypes | None = None


@dataclass(slots=True)
class Operator:
    name: str | None = None
    overload: str | None = None


@dataclass(slots=True)
class KernelCall:
    op_index: int = 0
    args: list[int] = field(default_factory=list)


@dataclass(slots=True)
class DelegateCall:
    delegate_index: int = 0
    args: list[int] = field(default_factory=list)


@dataclass(slots=True)
class MoveCall:
    move_from: int = 0
    move_to: int = 0


@dataclass(slots=True)
class JumpFalseCall:
    cond_value_index: int = 0
    destination_instruction: int = 0


@dataclass(slots=True)
class FreeCall:
    value_index: int = 0


InstructionArguments = KernelCall | DelegateCall | MoveCall | JumpFalseCall | FreeCall


@dataclass(slots=True)
class Instruction:
    instr_args: InstructionArguments | None = None


@dataclass(slots=True)
class Frame:
    filename: str | None = None
    lineno: int = 0
    name: str | None = None
    context: str | None = None


@dataclass(slots=True)
class FrameList:
    items: list[Frame] = field(default_factory=list)


@dataclass(slots=True)
class BackendDelegateDataReference:
    location: int = 0
    index: int = 0


@dataclass(slots=True)
class CompileSpec:
    key: str | None = None
    value: bytes = b""


@dataclass(slots=True)
class BackendDelegate:
    id: str | None = None
    processed: BackendDelegateDataReference | None = None
    compile_specs: list[CompileSpec] = field(default_factory=list)


@dataclass(slots=True)
class Chain:
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    stacktrace: list[FrameList] | None = None


@dataclass(slots=True)
class ExecutionPlan:
    name: str | None = None
    container_meta_type: ContainerMetadata | None = None
    values: list[EValue] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    chains: list[Chain] = field(default_factory=list)
    operators: list[Operator] = field(default_factory=list)
    delegates: list[BackendDelegate] = field(default_factory=list)
    non_const_buffer_sizes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Buffer:
    storage: bytes = b""


@dataclass(slots=True)
class BackendDelegateInlineData:
    data: bytes = b""


@dataclass(slots=True)
class DataSegment:
    offset: int = 0
    size: int = 0


@dataclass(slots=True)
class SubsegmentOffsets:
    segment_index: int = 0
    offsets: list[int] = field(default_factory=list)


@dataclass(slots=True)
class NamedData:
    key: str | None = None
    segment_index: int = 0


@dataclass(slots=True)
class Program:
    version: int = 0
    execution_plan: list[ExecutionPlan] = field(default_factory=list)
    constant_buffer: list[Buffer] = field(default_factory=list)
    backend_delegate_data: list[BackendDelegateInlineData] = field(default_factory=list)
    segments: list[DataSegment] = field(default_factory=list)
    constant_segment: SubsegmentOffsets | None = None
    mutable_data_segments: list[SubsegmentOffsets] = field(default_factory=list)
    named_data: list[NamedData] = field(default_factory=list)


TABLE_TYPES: dict[str, type] = mirror(
    ContainerMetadata, Null, AllocationDetails, ExtraTensorInfo, Tensor, Int, Bool, Double, String, IntList,
    DoubleList, BoolList, TensorList, OptionalTensorList, EValue, Operator, KernelCall, DelegateCall, MoveCall,
    JumpFalseCall, FreeCall, Instruction, Frame, FrameList, BackendDelegateDataReference, CompileSpec,
    BackendDelegate, Chain, ExecutionPlan, Buffer, BackendDelegateInlineData, DataSegment, SubsegmentOffsets,
    NamedData, Program,
)
