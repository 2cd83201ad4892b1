"""Malformed programs raise InvalidProgram (or another typed etbuild error), never crash or hang."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from etbuild.errors import EtbuildError, InvalidProgram
from etbuild.runtime import Program
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program, segment_bytes, write_program


def _load_and_call(data: bytes, **kw) -> None:
    method = Program.from_bytes(data).load_method(**kw)
    method(*[np.zeros(v.val.sizes, np.float32) for v in (method.plan.values[i] for i in method.plan.inputs)])


def _edited(pte_bytes: bytes, edit) -> bytes:
    """Decode, let `edit` change the Program, encode again (segments kept)."""
    program, header = read_program(pte_bytes)
    segments = [bytes(segment_bytes(pte_bytes, program, header, i)) for i in range(len(program.segments))]
    for plan in program.execution_plan:
        for ev in plan.values:
            if isinstance(ev.val, fb.Tensor):
                ev.val.dim_order = bytes(ev.val.dim_order)
    edit(program, program.execution_plan[0])
    return write_program(program, segments)


@pytest.fixture(scope="module")
def good(small_mlp_pte) -> bytes:
    return small_mlp_pte.read_bytes()


@pytest.mark.parametrize("cut", [0, 3, 7, 8, 20, 100, -1])
def test_truncated_files(good, cut):
    with pytest.raises(InvalidProgram):
        _load_and_call(good[:cut] if cut >= 0 else good[: len(good) // 2])


def test_wrong_identifier(good):
    with pytest.raises(InvalidProgram, match=r"identifier is b'XX12', expected b'ET12'"):
        Program.from_bytes(good[:4] + b"XX12" + good[8:])


def test_root_offset_out_of_range(good):
    with pytest.raises(InvalidProgram, match="Program table: bytes 2147483632..2147483636 lie outside"):
        Program.from_bytes(struct.pack("<I", 0x7FFFFFF0) + good[4:])


def _first_constant(plan: fb.ExecutionPlan) -> fb.Tensor:
    return next(ev.val for ev in plan.values if isinstance(ev.val, fb.Tensor) and ev.val.data_buffer_idx)


EDITS = {
    "value index out of range": (lambda p, plan: setattr(plan.chains[0].instructions[0].instr_args, "args", [999, 0]),
                                 "value index 999 is out of range"),
    "operator index out of range": (lambda p, plan: setattr(plan.chains[0].instructions[0].instr_args, "op_index", 7),
                                    "operator index 7 is out of range"),
    "absurd planned size": (lambda p, plan: setattr(plan, "non_const_buffer_sizes", [0, 1 << 50]),
                            "exceed"),
    "negative size": (lambda p, plan: setattr(plan.values[plan.inputs[0]].val, "sizes", [-2, 16]),
                      "negative size"),
    "dim_order not a permutation": (lambda p, plan: setattr(plan.values[plan.inputs[0]].val, "dim_order", b"\x00\x00"),
                                    "is not a permutation"),
    "tensor beyond its arena": (lambda p, plan: setattr(plan.values[plan.inputs[0]].val, "sizes", [2000, 16]),
                                "run past the"),
    "wrong argument count": (lambda p, plan: setattr(plan.chains[0].instructions[-1].instr_args, "args", [0]),
                             "the program gives 1 values"),
    "unknown scalar type": (lambda p, plan: setattr(plan.values[plan.inputs[0]].val, "scalar_type", 99),
                            "scalar type 99 is not supported"),
    "constant index out of range": (lambda p, plan: setattr(_first_constant(plan), "data_buffer_idx", 50),
                                    "data_buffer_idx 50 has no constant buffer"),
    "jump out of range": (lambda p, plan: plan.chains[0].instructions.append(fb.Instruction(fb.JumpFalseCall(0, 99))),
                          "jump destination 99 is outside"),
    "unknown operator": (lambda p, plan: setattr(plan.operators[0], "name", "aten::nope"),
                         "has no kernel in this runtime"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_structural_errors(good, case):
    edit, message = EDITS[case]
    with pytest.raises(InvalidProgram, match=message):
        _load_and_call(_edited(good, edit))


def test_endless_jump_loop_is_stopped_by_the_budget(good):
    def loop(program, plan):
        plan.values.append(fb.EValue(fb.Bool(False)))
        plan.chains[0].instructions.insert(0, fb.Instruction(fb.JumpFalseCall(len(plan.values) - 1, 0)))

    with pytest.raises(InvalidProgram, match="ran 1000 instructions without finishing"):
        _load_and_call(_edited(good, loop), instruction_budget=1000)


def test_huge_vector_length_is_rejected_without_allocating(good):
    program, _ = read_program(good)
    n_ops = len(program.execution_plan[0].operators)
    needle = struct.pack("<I", n_ops)
    data = bytearray(good)
    # Make every u32 equal to the operator count claim 2**31 elements; some of them are vector lengths.
    for pos in range(8, len(data) - 4):
        if data[pos : pos + 4] == needle and pos % 4 == 0:
            data[pos : pos + 4] = struct.pack("<I", 1 << 31)
    with pytest.raises(InvalidProgram):
        _load_and_call(bytes(data))


def test_seeded_mutation_fuzzer(good):
    """Random byte mutations of a real program: every outcome is success or a typed error."""
    rng = random.Random(1234)
    program, header = read_program(good)
    flat_end = header.program_size if header else len(good)
    outcomes = {"ok": 0, "typed error": 0}
    for _ in range(400):
        data = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(0, flat_end)
            data[pos] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        try:
            _load_and_call(bytes(data), instruction_budget=10_000, max_planned_bytes=1 << 24)
            outcomes["ok"] += 1
        except EtbuildError:
            outcomes["typed error"] += 1
    assert outcomes["typed error"] > 50, outcomes


def test_delegated_program_names_the_missing_backend(good):
    def delegate(program, plan):
        plan.delegates = [fb.BackendDelegate(id="CoreMLBackend", processed=fb.BackendDelegateDataReference(0, 0))]
        plan.chains[0].instructions.insert(0, fb.Instruction(fb.DelegateCall(0, [plan.inputs[0]])))

    with pytest.raises(InvalidProgram, match=r"delegate 0 \(CoreMLBackend\): this runtime has no backend 'CoreMLB"):
        _load_and_call(_edited(good, delegate))
