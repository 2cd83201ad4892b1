"""Python types that mirror `schema/flat_tensor.fbs` (the `.ptd` weights format) field for field
(etbuild.runtime.format.mirror), and the reader's layout of that schema (`reader.schema_layout`: a
trimmed runtime with the EXTERNAL_DATA feature holds it as a literal and ships no `.fbs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from etbuild.runtime.format.mirror import mirror
from etbuild.runtime.format.reader import Layout, schema_layout

SCHEMA_FILE = "flat_tensor.fbs"  # in etbuild.schema


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


TYPES: dict[str, type] = mirror(TensorLayout, DataSegment, NamedData, FlatTensor)


@cache
def flat_tensor_layout() -> Layout:
    """The reader's layout of flat_tensor.fbs, decoding into the types above (parsed once; a trimmed runtime
    holds it as a literal, as it holds its backends' schemas)."""
    return schema_layout(SCHEMA_FILE, TYPES)
