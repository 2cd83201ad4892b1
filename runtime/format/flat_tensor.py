"""Python types that mirror `schema/flat_tensor.fbs` (the `.ptd` weights format) field for field,
and the reader's layout of that schema as a literal.

The layout is written out here rather than parsed from the `.fbs` at run time, so that a trimmed
runtime reads `.ptd` files without shipping the schema; `tests/runtime/test_ptd.py` checks it
against `layout(load_schema(FLAT_TENSOR_FBS))`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from etbuild.runtime.format.reader import Layout


@dataclass(slots=True)
class TensorLayout:
    scalar_type: int = 0
    sizes: list[int] = field(default_factory=list)
    dim_order: bytes = b""


@dataclass(slots=True)
class DataSegment:
    offset: int = 0
    size: int = 0


@dataclass(slots=True)
class NamedData:
    key: str | None = None
    segment_index: int = 0
    tensor_layout: TensorLayout | None = None


@dataclass(slots=True)
class FlatTensor:
    version: int = 0
    segments: list[DataSegment] = field(default_factory=list)
    named_data: list[NamedData] = field(default_factory=list)


TYPES: dict[str, type] = {cls.__name__: cls for cls in (TensorLayout, DataSegment, NamedData, FlatTensor)}

LAYOUT = Layout(
    tables={
        "TensorLayout": (
            ("scalar_type", "enum", "byte", False, 0, 0),
            ("sizes", "scalar", "int", True, 1, 0),
            ("dim_order", "scalar", "ubyte", True, 2, 0),
        ),
        "DataSegment": (("offset", "scalar", "ulong", False, 0, 0), ("size", "scalar", "ulong", False, 1, 0)),
        "NamedData": (
            ("key", "string", "string", False, 0, 0),
            ("segment_index", "scalar", "uint", False, 1, 0),
            ("tensor_layout", "table", "TensorLayout", False, 2, 0),
        ),
        "FlatTensor": (
            ("version", "scalar", "uint", False, 0, 0),
            ("segments", "table", "DataSegment", True, 1, 0),
            ("named_data", "table", "NamedData", True, 2, 0),
        ),
    },
    unions={},
    root="FlatTensor",
    types=TYPES,
)
