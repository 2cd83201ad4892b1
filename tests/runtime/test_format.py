"""schema/program.fbs, its Python mirror types, and the reader/writer/container."""

from __future__ import annotations

import dataclasses
import math

import pytest

from etbuild.errors import InvalidProgram
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.fbs import SchemaSyntaxError, load_schema, parse_schema
from etbuild.runtime.format.pte import read_header, read_program, segment_bytes, write_program
from etbuild.runtime.format.reader import decode, layout
from etbuild.runtime.format.writer import encode


def test_mirror_types_match_the_schema_field_for_field():
    schema = load_schema()
    assert set(schema.tables) == set(fb.TABLE_TYPES)
    for name, fields in schema.tables.items():
        mirror = [f.name for f in dataclasses.fields(fb.TABLE_TYPES[name])]
        assert mirror == [f.name for f in fields], name


def test_schema_identifier_root_and_union_order():
    schema = load_schema()
    assert schema.file_identifier == "ET12"
    assert schema.root_type == "Program"
    assert schema.unions["KernelTypes"][:5] == ["Null", "Int", "Bool", "Double", "Tensor"]
    instructions = ["KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall"]
    assert schema.unions["InstructionArguments"] == instructions
    tensor_slots = {f.name: f.slot for f in schema.tables["Tensor"]}
    assert tensor_slots["data_buffer_idx"] == 5 and tensor_slots["allocation_info"] == 6
    evalue = schema.tables["EValue"][0]
    assert (evalue.name, evalue.slot) == ("val", 1)  # slot 0 is the hidden union type field


def test_parser_rejects_unknown_types():
    with pytest.raises(SchemaSyntaxError, match="unknown type 'Nope'"):
        parse_schema("table A { x: Nope; } root_type A;")


def _sample_program() -> fb.Program:
    t = fb.Tensor(scalar_type=fb.ScalarType.FLOAT, sizes=[2, 3], dim_order=bytes([0, 1]),
                  allocation_info=fb.AllocationDetails(1, 32, 0))
    plan = fb.ExecutionPlan(
        name="forward",
        values=[fb.EValue(t), fb.EValue(fb.Int(-5)), fb.EValue(fb.IntList([1])), fb.EValue(fb.Double(2.5)),
                fb.EValue(fb.Bool(True)), fb.EValue(fb.Null()), fb.EValue(fb.OptionalTensorList([0, -1]))],
        inputs=[0], outputs=[0],
        chains=[fb.Chain(stacktrace=[], instructions=[fb.Instruction(fb.KernelCall(0, [0, 0])),
                                       fb.Instruction(fb.JumpFalseCall(4, 2))])],
        operators=[fb.Operator("aten::relu", "out")], non_const_buffer_sizes=[0, 64],
    )
    return fb.Program(execution_plan=[plan], constant_segment=fb.SubsegmentOffsets(0, [0, 0]))


def test_encode_decode_round_trip():
    program = _sample_program()
    data = encode(program, load_schema())
    assert data[4:8] == b"ET12"
    back = decode(data, layout(load_schema()))
    back.execution_plan[0].values[0].val.dim_order = bytes(back.execution_plan[0].values[0].val.dim_order)
    assert back == program


def test_equal_strings_vectors_and_scalar_tables_are_written_once():
    program = _sample_program()
    single = len(encode(program, load_schema()))
    plan = program.execution_plan[0]
    twin = dataclasses.replace(plan.values[0].val)  # same sizes, dim order and allocation
    plan.values += [fb.EValue(twin), fb.EValue(fb.Int(-5)), fb.EValue(fb.IntList([1]))]
    plan.operators.append(fb.Operator("aten::relu", "out"))
    data = encode(program, load_schema())
    # Each new entry costs its own table and offset only: the Tensor's sizes, dim order and
    # AllocationDetails, the Int, the IntList's items and the operator's strings are shared.
    assert len(data) - single <= 4 * 24
    back = decode(data, layout(load_schema()))
    values = back.execution_plan[0].values
    assert (list(values[-3].val.sizes), bytes(values[-3].val.dim_order)) == ([2, 3], bytes([0, 1]))
    assert values[-3].val.allocation_info == fb.AllocationDetails(1, 32, 0)
    assert (values[-2].val, list(values[-1].val.items)) == (fb.Int(-5), [1])
    assert back.execution_plan[0].operators[-1] == fb.Operator("aten::relu", "out")


def test_equal_tables_with_children_are_written_once_and_signed_zeros_stay_apart():
    program = _sample_program()
    plan = program.execution_plan[0]
    plan.values += [fb.EValue(fb.Double(0.0)), fb.EValue(fb.Double(-0.0))]
    single = len(encode(program, load_schema()))
    twin = dataclasses.replace(plan.values[0].val)
    plan.values += [fb.EValue(twin), fb.EValue(dataclasses.replace(twin))]  # the same Tensor twice more
    data = encode(program, load_schema())
    # The two new EValues (a union pointing at a Tensor with children) share one table: the
    # vector grows by two offsets, the buffer by one EValue table and one Tensor table at most.
    assert len(data) - single <= 2 * 4 + 2 * 32
    values = decode(data, layout(load_schema())).execution_plan[0].values
    assert [math.copysign(1.0, v.val.double_val) for v in values[-4:-2]] == [1.0, -1.0]
    assert list(values[-1].val.sizes) == list(values[-2].val.sizes) == [2, 3]


def test_writer_is_deterministic():
    assert write_program(_sample_program(), [b"abc"]) == write_program(_sample_program(), [b"abc"])


def test_container_without_segment_data_has_no_header():
    data = write_program(_sample_program(), [b""])
    assert read_header(data) is None
    program, _ = read_program(data)
    assert [(s.offset, s.size) for s in program.segments] == [(0, 0)]


def test_container_with_segments_has_extended_header():
    payloads = [b"x" * 100, b"y" * 10]
    data = write_program(_sample_program(), payloads)
    header = read_header(data)
    assert data[8:12] == b"eh00"
    assert header.segment_base_offset % 128 == 0
    assert header.segment_base_offset >= header.program_size
    assert header.segment_data_size == 128 + 10  # first segment padded to the alignment
    program, header = read_program(data)
    assert [bytes(segment_bytes(data, program, header, i)) for i in range(2)] == payloads


def test_segment_beyond_file_is_invalid():
    data = write_program(_sample_program(), [b"x" * 100])
    with pytest.raises(InvalidProgram, match="segments end at byte"):
        read_program(data[:-10])
