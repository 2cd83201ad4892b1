"""schema/xnnpack.fbs, its mirror types, the blob container, and ExecuTorch-built blobs both ways."""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import numpy as np
import pytest
import torch
from torch import nn

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.blob import read_blob, read_header, write_blob, xnnpack_schema
from etbuild.errors import InvalidProgram
from etbuild.runtime.format.fbs import SchemaSyntaxError, parse_schema
from etbuild.runtime.format.pte import read_program, segment_bytes, write_program
from tests.backends.xnnpack.graphs import fc_graph
from tests.conftest import requires_executorch

# XNodeUnion tags 1..47, as ExecuTorch's runtime numbers them (../shared/XNNPACK-FORMAT.md).
NODE_TAGS = [
    "Add", "FullyConnected", "Softmax", "Sigmoid", "StaticTranspose", "Clamp", "Conv2d", "Div",
    "StaticResizeBilinear2D", "StaticConstantPad", "AvgPooling2d", "Minimum", "DepthwiseConv2d", "MaxPooling2d",
    "Multiply", "Subtract", "Floor", "Convert", "GlobalAvgPooling2d", "StaticReshape", "ArgMaxPooling2d",
    "SquareRoot", "Ceiling", "Hardswish", "LeakyReLU", "Maximum", "Negate", "Square", "ELU", "Abs", "PReLU",
    "Concatenate2", "Concatenate3", "Concatenate4", "StaticSlice", "ScaledDotProductAttention",
    "BatchMatrixMultiply", "Concatenate5", "ConvTranspose2d", "ReciprocalSquareRoot", "Log", "Gelu", "Tanh", "Exp",
    "Sin", "Copy", "Cos",
]


def test_mirror_types_match_the_schema_field_for_field():
    schema = xnnpack_schema()
    assert set(schema.tables) == set(g.TABLE_TYPES)
    for name, fields in schema.tables.items():
        assert [f.name for f in dataclasses.fields(g.TABLE_TYPES[name])] == [f.name for f in fields], name
    for member, table in schema.aliases.items():
        cls = g.MEMBER_TYPES[member]
        assert issubclass(cls, g.TABLE_TYPES[table]) and cls.__name__ == member
    assert set(schema.aliases) == set(g.MEMBER_TYPES)


def test_schema_facts():
    schema = xnnpack_schema()
    assert (schema.root_type, schema.file_identifier) == ("XNNGraph", "XN01")
    assert schema.unions["NodeUnion"] == NODE_TAGS
    assert schema.unions["ValueUnion"] == ["TensorValue", "QuantizedTensorValue"]
    assert schema.unions["QuantParams"] == ["PerChannelQuant", "PerTensorQuant", "PerTokenDynamicQuant",
                                            "PerChannelGroupQuant"]
    slots = {t: {f.name: f.slot for f in fs} for t, fs in schema.tables.items()}
    assert slots["XNNGraph"]["constant_data"] == 8  # after the deprecated mem_buffer_sizes slot
    assert slots["PerChannelGroupQuant"]["scale_buffer_idx"] == 4  # after the deprecated scale_bf16 slot
    assert slots["XNode"]["debug_handle"] == 2  # a union takes two slots
    assert slots["TensorValue"]["dq_datatype"] == 7
    enums = schema.enums["XNNDatatype"]
    assert enums[0] == "short" and enums[1]["qbint4"] == 10 and enums[1]["bf16"] == 14


def test_parser_union_aliases_deprecated_fields_and_enum_defaults():
    schema = parse_schema(
        "enum E : short { a = 0, b = 3 } table T { x: int; } "
        "table U { old: [ushort] (deprecated); e: E = b; u: Kinds; } union Kinds { One: T, T } root_type U;"
    )
    assert schema.unions["Kinds"] == ["One", "T"] and schema.aliases == {"One": "T"}
    assert [(f.name, f.slot, f.default) for f in schema.tables["U"]] == [("e", 1, 3), ("u", 3, 0)]
    with pytest.raises(SchemaSyntaxError, match="not a member of enum E"):
        parse_schema("enum E : short { a = 0 } table U { e: E = z; } root_type U;")
    with pytest.raises(SchemaSyntaxError, match="must be a table"):
        parse_schema("table T { x: int; } union K { T: T, One: Missing } root_type T;")


def test_blob_header_layout():
    gb, _, _ = fc_graph()
    graph = gb.graph()
    blob = write_blob(graph, b"\x01" * 5)
    zero, magic, length, fb_off, fb_size, c_off, c_size = struct.unpack_from("<4s4sHIIIQ", blob)
    assert (zero, magic, length, fb_off) == (bytes(4), b"XH00", 30, 32)
    assert blob[30:32] == b"\0\0" and blob[fb_off + 4 : fb_off + 8] == b"XN01"
    assert c_off == 32 + -(-fb_size // 16) * 16 and c_size == 5 and blob[c_off:] == b"\x01" * 5
    decoded = read_blob(blob)
    assert decoded.graph == graph and bytes(decoded.constants) == b"\x01" * 5


def test_legacy_blobs_without_header_and_xn00_are_read():
    graph = fc_graph()[0].graph()
    flat = write_blob(graph)[32:]
    flat = flat[: len(flat) - len(flat) % 16 or None]
    assert read_header(flat) is None
    assert read_blob(flat).graph == graph
    assert read_blob(flat[:4] + b"XN00" + flat[8:]).graph == graph
    with pytest.raises(InvalidProgram, match="identifier"):
        read_blob(flat[:4] + b"XN99" + flat[8:])


def test_writer_is_deterministic_and_round_trips_every_node_kind():
    gb, _, _ = fc_graph()
    for k, member in enumerate(NODE_TAGS):
        gb.node(member)  # default fields: the container only (the runtime would reject these nodes)
        assert type(gb.nodes[-1].node).__name__ == member, k
    graph = gb.graph()
    assert read_blob(write_blob(graph)).graph == graph
    assert write_blob(graph) == write_blob(graph)


# ---------------------------------------------------------------- ExecuTorch-built blobs


def _oracle_programs() -> dict[str, bytes]:
    from tests.backends.xnnpack.oracle import lower

    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8), nn.Flatten(),
                        nn.Linear(8 * 7 * 7, 5))
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x, v = torch.randn(1, 3, 9, 9), torch.randn(3, 16)
    return {
        "float": lower(cnn, (x,)).pte,
        "static-int8": lower(cnn, (x,), quant="static").pte,
        "dynamic-int8": lower(mlp, (v,), quant="dynamic").pte,
    }


@pytest.fixture(scope="module")
def oracle_programs() -> dict[str, bytes]:
    return _oracle_programs()


def _blobs(pte: bytes) -> list[tuple[int, bytes]]:
    program, header = read_program(pte)
    return [(d.processed.index, bytes(segment_bytes(pte, program, header, d.processed.index)))
            for plan in program.execution_plan for d in plan.delegates]


@requires_executorch
@pytest.mark.interop
def test_executorch_blobs_round_trip_and_our_encoding_runs_in_executorch(oracle_programs):
    from tests.backends.xnnpack.oracle import run_executorch

    for name, pte in oracle_programs.items():
        program, header = read_program(pte)
        segments = [bytes(segment_bytes(pte, program, header, i)) for i in range(len(program.segments))]
        for index, blob in _blobs(pte):
            decoded = read_blob(blob)
            ours = write_blob(decoded.graph, bytes(decoded.constants))
            assert read_blob(ours).graph == decoded.graph, name
            segments[index] = ours
        swapped = write_program(program, segments)
        x = torch.randn(1, 3, 9, 9) if name != "dynamic-int8" else torch.randn(3, 16)
        expected, actual = run_executorch(pte, [x]), run_executorch(swapped, [x])
        for a, e in zip(actual, expected):
            np.testing.assert_array_equal(a, e, err_msg=name)


@requires_executorch
@pytest.mark.interop
def test_executorch_blob_facts(oracle_programs):
    """What ExecuTorch writes: header, constants as named data keyed by content, NHWC inside, Converts."""
    for name, pte in oracle_programs.items():
        program, header = read_program(pte)
        named = {n.key: bytes(segment_bytes(pte, program, header, n.segment_index)) for n in program.named_data}
        for key, data in named.items():
            digest = hashlib.sha256(data).hexdigest()
            assert key in (digest, "scale_" + digest), name
        for _, blob in _blobs(pte):
            hdr = read_header(blob)
            assert hdr is not None and hdr.constant_size == 0 and hdr.flatbuffer_offset == 32
            graph = read_blob(blob).graph
            assert graph.constant_data[0] == g.ConstantDataOffset(0, 0, "")
            assert all(c.offset == g.NAMED_OFFSET and c.named_key in named for c in graph.constant_data[1:])
            tensors = [v.value if isinstance(v.value, g.TensorValue) else v.value.tensor_value for v in graph.xvalues]
            assert [t.id_out for t in tensors] == list(range(len(tensors)))  # id_out is the index
            ins = [t.external_id for t in tensors if t.flags == g.FLAG_EXTERNAL_INPUT]
            outs = [t.external_id for t in tensors if t.flags == g.FLAG_EXTERNAL_OUTPUT]
            assert sorted(ins + outs) == list(range(graph.num_externs)) and max(ins) < min(outs)  # inputs first
        nodes = [n.node for _, b in _blobs(pte) for n in read_blob(b).graph.xnodes]
        perms = [n.perm for n in nodes if isinstance(n, g.StaticTranspose)]
        if name != "dynamic-int8":  # NCHW in, NHWC inside, NCHW out
            assert perms[0] == [0, 2, 3, 1] and perms[-1] == [0, 3, 1, 2]
        convert = g.MEMBER_TYPES["Convert"]
        if name == "static-int8":  # the boundary quantize/dequantize are Convert nodes
            assert isinstance(nodes[0], convert) and isinstance(nodes[-1], convert)
        if name == "dynamic-int8":  # fp32 → per-row qdint8 before each linear, whose output is fp32
            assert [type(n).__name__ for n in nodes] == ["Convert", "FullyConnected"] * 2
