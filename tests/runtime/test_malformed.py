"""Malformed programs raise InvalidProgram (or another typed etbuild error), never crash or hang."""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest

from etbuild.errors import InvalidProgram
from etbuild.runtime import Program
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program
from tests.fuzz.harness import campaign
from tests.fuzz.mutators import ByteMutator, StructureMutator, edited


def _load_and_call(data: bytes, **kw) -> None:
    method = Program.from_bytes(data).load_method(**kw)
    method(*[np.zeros(v.val.sizes, np.float32) for v in (method.plan.values[i] for i in method.plan.inputs)])


def _edited(pte_bytes: bytes, edit) -> bytes:
    """Decode, let `edit(program, first plan)` change it, encode again (segments kept)."""
    return edited(pte_bytes, lambda program: edit(program, program.execution_plan[0]))


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
    "no arguments": (lambda p, plan: setattr(plan.chains[0].instructions[0].instr_args, "args", []),
                     "the program gives 0 values"),
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


def test_a_loop_whose_condition_nothing_changes_fails_at_once(good):
    def loop(program, plan):
        plan.values.append(fb.EValue(fb.Bool(False)))
        plan.chains[0].instructions.insert(0, fb.Instruction(fb.JumpFalseCall(len(plan.values) - 1, 0)))

    with pytest.raises(InvalidProgram) as err:
        _load_and_call(_edited(good, loop))
    assert str(err.value) == (
        f"instruction 0: the loop at instructions 0..0 never ends: it jumps back while its condition, "
        f"value {_value_count(good)}, is false, and nothing in the loop changes that value"
    )


def _value_count(pte: bytes) -> int:
    return len(read_program(pte)[0].execution_plan[0].values)


def _counting_loop(program: fb.Program, plan: fb.ExecutionPlan) -> None:
    """Prepend `c += 1; flag = c == -1; jump back unless flag`: a loop that never ends, though
    its condition is recomputed every time round."""
    base = len(plan.values)
    plan.values += [fb.EValue(fb.Int(0)), fb.EValue(fb.Int(1)), fb.EValue(fb.Int(-1)), fb.EValue(fb.Bool(False))]
    c, one, never, flag = range(base, base + 4)
    plan.operators += [fb.Operator("executorch_prim::add", "Scalar"), fb.Operator("executorch_prim::eq", "Scalar")]
    add, eq = len(plan.operators) - 2, len(plan.operators) - 1
    plan.chains[0].instructions[:0] = [
        fb.Instruction(fb.KernelCall(add, [c, one, c])),
        fb.Instruction(fb.KernelCall(eq, [c, never, flag])),
        fb.Instruction(fb.JumpFalseCall(flag, 0)),
    ]


def test_an_endless_loop_is_stopped_by_the_budget_naming_the_loop(good):
    program = Program.from_bytes(_edited(good, _counting_loop))
    method = program.load_method()
    n = len(method.steps)
    x = np.zeros(method.plan.values[method.plan.inputs[0]].val.sizes, np.float32)
    start = time.perf_counter()
    with pytest.raises(InvalidProgram) as err:
        method(x)
    assert time.perf_counter() - start < 1.0
    assert str(err.value) == (
        f"method 'forward' ran {1000 * n} instructions (its budget) without finishing, in the loop at instructions "
        "0..2 (the jump at 2 back to 0): a loop that never ends? (load_method's budget_factor and time_limit allow "
        "longer calls)"
    )


def test_an_endless_loop_is_stopped_by_the_time_limit(good):
    method = Program.from_bytes(_edited(good, _counting_loop)).load_method(budget_factor=10**9, time_limit=0.05)
    x = np.zeros(method.plan.values[method.plan.inputs[0]].val.sizes, np.float32)
    with pytest.raises(InvalidProgram, match=r"ran past its 0.05 s time limit without finishing, in the loop at "
                                             r"instructions 0..2 \(the jump at 2 back to 0\)"):
        method(x)


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


@pytest.mark.parametrize(("mutator", "count"), [(ByteMutator(), 300), (StructureMutator(), 150)])
def test_seeded_mutants_raise_only_etbuild_errors(good, mutator, count):
    """A small sample of the fuzz tier (tests/fuzz): no untyped error, slow call or MemoryError."""
    tally = campaign([good], mutator, count, seed=1234)
    assert tally.breaches == []
    assert tally.outcomes["InvalidProgram"] > count // 4, tally.outcomes


def test_delegated_program_names_the_missing_backend(good):
    def delegate(program, plan):
        plan.delegates = [fb.BackendDelegate(id="CoreMLBackend", processed=fb.BackendDelegateDataReference(0, 0))]
        plan.chains[0].instructions.insert(0, fb.Instruction(fb.DelegateCall(0, [plan.inputs[0]])))

    with pytest.raises(InvalidProgram, match=r"delegate 0 \(CoreMLBackend\): this runtime has no backend 'CoreMLB"):
        _load_and_call(_edited(good, delegate))


def _instruction_of(plan: fb.ExecutionPlan, operator: str) -> fb.KernelCall:
    return next(i.instr_args for i in plan.chains[0].instructions
                if isinstance(i.instr_args, fb.KernelCall) and plan.operators[i.instr_args.op_index].name == operator)


def test_a_fast_path_that_cannot_take_its_arguments_leaves_the_error_to_the_kernel():
    """A layer norm whose weight has fewer elements than the normalized dims (the fuzz tier's mutant
    347): binding its fast path fails, the call is left to the kernel, which raises a KernelError."""
    import torch

    from etbuild.errors import KernelError
    from etbuild.pipeline import compile_module

    pte = compile_module(torch.nn.LayerNorm(8), (torch.randn(3, 8),)).pte

    def shrink_weight(program: fb.Program, plan: fb.ExecutionPlan) -> None:
        call = _instruction_of(plan, "aten::native_layer_norm")
        plan.values[call.args[2]].val.sizes = [7]

    with pytest.raises(KernelError, match="cannot reshape"):
        _load_and_call(_edited(pte, shrink_weight))


def test_a_layout_copy_without_a_result_slot_stays_a_copy():
    """The fuzz tier's mutant 22: a permute_copy call without its result slot was offered to the
    aliaser, which read past the call's arguments; now it is bound as a copy and runs."""
    import torch

    from etbuild.pipeline import compile_module

    class Permuted(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.permute(1, 0) * 2

    x = torch.randn(3, 5)
    pte = compile_module(Permuted(), (x,)).pte

    def drop_result_slot(program: fb.Program, plan: fb.ExecutionPlan) -> None:
        call = _instruction_of(plan, "aten::permute_copy")
        call.args = call.args[:-1]

    (out,) = Program.from_bytes(_edited(pte, drop_result_slot)).load_method()(x.numpy())
    np.testing.assert_allclose(out, x.numpy().T * 2)
