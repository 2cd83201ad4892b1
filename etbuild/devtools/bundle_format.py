"""The bundled program container (`.bpte`, identifier BP08), both ways, without torch.

Python types that mirror `schema/bundled_program.fbs` field for field (etbuild.runtime.format.mirror),
and `read_bundle` / `write_bundle`. A test case's tensors are contiguous bytes in their `dim_order`; the program
is the whole `.pte` file, 32-byte aligned inside the bundle. Reading checks the identifier
and decodes with the bounds-checked reader, so a truncated or foreign file raises
`InvalidBundle` naming the file and what is wrong (docs/devtools.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from etbuild.devtools.schemas import devtools_schema
from etbuild.errors import InvalidBundle, InvalidProgram
from etbuild.runtime.format.fbs import Schema
from etbuild.runtime.format.mirror import mirror
from etbuild.runtime.format.program import Bool, Double, Int  # the same tables as program.fbs's
from etbuild.runtime.format.reader import Layout, decode, schema_layout
from etbuild.runtime.format.writer import encode
from etbuild.runtime.tensor import numpy_dtype, scalar_type

SCHEMA_FILE = "bundled_program.fbs"  # in etbuild.schema
IDENTIFIER = b"BP08"
VERSION = 2  # what ExecuTorch 1.5.1's serializer writes


@dataclass(slots=True)
class Tensor:
    scalar_type: int = 0
    sizes: list[int] = field(default_factory=list)
    data: bytes = b""
    dim_order: bytes = b""


@dataclass(slots=True)
class Value:
    val: Tensor | Int | Bool | Double | None = None


@dataclass(slots=True)
class BundledMethodTestCase:
    inputs: list[Value] = field(default_factory=list)
    expected_outputs: list[Value] = field(default_factory=list)


@dataclass(slots=True)
class BundledMethodTestSuite:
    method_name: str | None = None
    test_cases: list[BundledMethodTestCase] = field(default_factory=list)


@dataclass(slots=True)
class BundledProgram:
    version: int = 0
    method_test_suites: list[BundledMethodTestSuite] = field(default_factory=list)
    program: bytes = b""


TYPES: dict[str, type] = mirror(Int, Bool, Double, Tensor, Value, BundledMethodTestCase, BundledMethodTestSuite,
                                BundledProgram)


@cache
def bundle_layout() -> Layout:
    """The reader's layout of bundled_program.fbs, decoding into the types above."""
    return schema_layout(SCHEMA_FILE, TYPES)


def bundle_schema() -> Schema:
    return devtools_schema(SCHEMA_FILE)


def read_bundle(data: Any, source: str = "<bytes>") -> BundledProgram:
    """Decode and check a `.bpte`; InvalidBundle (naming `source`) when it is not a well-formed one."""
    size = len(data)
    if size < 8:
        raise InvalidBundle(f"{source}: {size} bytes is too short to be a bundled program")
    ident = bytes(data[4:8])
    if ident != IDENTIFIER:
        raise InvalidBundle(f"{source}: identifier is {ident!r}, expected {IDENTIFIER!r} (a bundled program, .bpte)")
    try:
        bundle = decode(data, bundle_layout())
    except InvalidProgram as exc:
        raise InvalidBundle(f"{source}: malformed bundled program: {exc}") from None
    _check(bundle, source)
    return bundle


def _check(bundle: BundledProgram, source: str) -> None:
    """Every test value is present and every tensor's bytes match its sizes and type."""
    if not bundle.program:
        raise InvalidBundle(f"{source}: the bundle holds no program")
    for suite in bundle.method_test_suites:
        for i, case in enumerate(suite.test_cases):
            for kind, values in (("input", case.inputs), ("expected output", case.expected_outputs)):
                for k, value in enumerate(values):
                    where = f"{source}: method {suite.method_name!r} case {i} {kind} {k}"
                    if value is None or value.val is None:
                        raise InvalidBundle(f"{where}: the value is empty")
                    if isinstance(value.val, Tensor):
                        tensor_array(value.val, where)


def tensor_array(t: Tensor, where: str) -> np.ndarray:
    """A bundled tensor as a contiguous numpy array (a copy); InvalidBundle when its bytes do not fit."""
    try:
        dtype = numpy_dtype(t.scalar_type)
    except InvalidProgram:
        raise InvalidBundle(f"{where}: scalar type {t.scalar_type} is not supported") from None
    if any(s < 0 for s in t.sizes):
        raise InvalidBundle(f"{where}: negative size in {list(t.sizes)}")
    count = int(np.prod(t.sizes, dtype=np.int64)) if t.sizes else 1
    if count * dtype.itemsize != len(t.data):
        raise InvalidBundle(f"{where}: {len(t.data)} data bytes for {dtype}{list(t.sizes)} "
                            f"({count * dtype.itemsize} expected)")
    order = list(t.dim_order) or list(range(len(t.sizes)))
    if sorted(order) != list(range(len(t.sizes))):
        raise InvalidBundle(f"{where}: dim_order {order} is not a permutation of {len(t.sizes)} dims")
    stored = np.frombuffer(bytes(t.data), dtype=dtype).reshape([t.sizes[d] for d in order])
    return stored.transpose(np.argsort(order)).copy()


def bundled_tensor(array: np.ndarray) -> Tensor:
    """A contiguous bundled tensor of a numpy array (dim order 0..n-1)."""
    a = np.ascontiguousarray(array)
    return Tensor(scalar_type(a.dtype), list(a.shape), a.tobytes(), bytes(range(a.ndim)))


def bundled_value(value: Any) -> Value:
    """A test input or output: a numpy array (or numpy scalar) as a Tensor; a Python bool, int or float as itself."""
    if isinstance(value, bool):
        return Value(Bool(value))
    if isinstance(value, int):
        return Value(Int(value))
    if isinstance(value, float):
        return Value(Double(value))
    return Value(bundled_tensor(np.asarray(value)))


def value_object(value: Value, where: str) -> Any:
    """A bundled value as what our runtime's methods take and give: an array, bool, int or float."""
    val = value.val
    if isinstance(val, Tensor):
        return tensor_array(val, where)
    if isinstance(val, Int):
        return val.int_val
    if isinstance(val, Bool):
        return val.bool_val
    if isinstance(val, Double):
        return val.double_val
    raise InvalidBundle(f"{where}: the value is empty")


def write_bundle(program: bytes, suites: dict[str, list[tuple[list[Any], list[Any]]]]) -> bytes:
    """A `.bpte` of `program` with, per method name, its cases as (inputs, expected outputs)."""
    bundle = BundledProgram(VERSION, [
        BundledMethodTestSuite(name, [BundledMethodTestCase([bundled_value(v) for v in ins],
                                                            [bundled_value(v) for v in outs])
                                      for ins, outs in cases])
        for name, cases in sorted(suites.items())
    ], program)
    return encode(bundle, bundle_schema())
