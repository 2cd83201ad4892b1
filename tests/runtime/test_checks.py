"""etbuild.runtime.checks: a program whose instructions pass what kernels do not accept is refused at load."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.errors import InvalidProgram, KernelError
from etbuild.pipeline import compile_module
from etbuild.runtime import Program
from etbuild.runtime.format import program as fb
from tests.fuzz.mutators import edited


@pytest.fixture(scope="module")
def mlp(small_mlp_pte) -> bytes:
    return small_mlp_pte.read_bytes()


@pytest.fixture(scope="module")
def conv_pool() -> bytes:
    """A convolution (instruction 0) then a max pool (instruction 1)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.MaxPool2d(2))
    return compile_module(model, (torch.randn(1, 1, 8, 8),)).pte


def _plan(program: fb.Program) -> fb.ExecutionPlan:
    return program.execution_plan[0]


def _call(plan: fb.ExecutionPlan, pc: int) -> fb.KernelCall:
    return plan.chains[0].instructions[pc].instr_args


def _load(data: bytes) -> None:
    Program.from_bytes(data).load_method()


def _error(data: bytes) -> str:
    with pytest.raises(InvalidProgram) as err:
        _load(data)
    return str(err.value)


def _give_list(plan: fb.ExecutionPlan, pc: int, arg: int, numbers: list[int]) -> None:
    """Give argument `arg` of instruction `pc` an IntList of its own holding `numbers` (argument
    values are shared between instructions, so editing one in place would edit them all)."""
    first = len(plan.values)
    plan.values += [fb.EValue(fb.Int(n)) for n in numbers]
    plan.values.append(fb.EValue(fb.IntList(list(range(first, first + len(numbers))))))
    _give(plan, pc, arg, len(plan.values) - 1)


def _give(plan: fb.ExecutionPlan, pc: int, arg: int, value: int) -> None:
    call = _call(plan, pc)
    call.args = [*call.args[:arg], value, *call.args[arg + 1:]]


def _index_of(plan: fb.ExecutionPlan, kind: type) -> int:
    return next(i for i, v in enumerate(plan.values) if isinstance(v.val, kind))


# argument positions: convolution.out (input, weight, bias, stride, padding, dilation, transposed,
# output_padding, groups, out); max_pool2d_with_indices.out (self, kernel_size, stride, padding, ...)
STRIDE, PADDING, DILATION, GROUPS = 3, 4, 5, 8
POOL_PADDING = 3


def test_a_list_where_a_tensor_is_due(mlp):
    def edit(program):
        plan = _plan(program)
        bias = _call(plan, 0).args[0]
        plan.values[bias] = fb.EValue(fb.IntList([]))

    bias = _call(_plan(Program.from_bytes(mlp).program), 0).args[0]
    assert _error(edited(mlp, edit)) == (
        f"<bytes>: method 'forward': instruction 0: argument bias of aten::addmm.out is value {bias}, a IntList; "
        "expected Tensor"
    )


def test_a_result_slot_of_the_wrong_type(mlp):
    def edit(program):
        plan = _plan(program)
        plan.values.append(fb.EValue(fb.Int(0)))
        _call(plan, 0).args = [*_call(plan, 0).args[:-1], len(plan.values) - 1]

    n = len(Program.from_bytes(mlp).program.execution_plan[0].values)
    message = _error(edited(mlp, edit))
    assert message.endswith(f"instruction 0: the result of aten::addmm.out, value {n}, is not a writable Tensor")


def test_a_result_written_into_the_constants(mlp):
    def edit(program):
        plan = _plan(program)
        call = _call(plan, 0)
        call.args = [*call.args[:-1], call.args[0]]  # the bias, a constant

    bias = _call(_plan(Program.from_bytes(mlp).program), 0).args[0]
    message = _error(edited(mlp, edit))
    assert message.endswith(f"instruction 0: the result of aten::addmm.out, value {bias}, is not a writable Tensor")


def test_a_stride_of_zero(conv_pool):
    message = _error(edited(conv_pool, lambda p: _give_list(_plan(p), 0, STRIDE, [0, 1])))
    assert message.endswith(
        "instruction 0: argument stride of aten::convolution.out is [0, 1]; each must be at least 1"
    )


def test_a_negative_padding(conv_pool):
    message = _error(edited(conv_pool, lambda p: _give_list(_plan(p), 0, PADDING, [-1, 0])))
    assert message.endswith("argument padding of aten::convolution.out is [-1, 0]; each must be at least 0")


def test_a_padding_wider_than_half_the_kernel(conv_pool):
    message = _error(edited(conv_pool, lambda p: _give_list(_plan(p), 1, POOL_PADDING, [2, 2])))
    assert message.endswith(
        "instruction 1: aten::max_pool2d_with_indices.out: pooling: padding 2 must be at most half the kernel size 2"
    )


def test_per_dim_lists_that_do_not_fit_the_input(conv_pool):
    message = _error(edited(conv_pool, lambda p: _give_list(_plan(p), 0, DILATION, [1, 1, 1])))
    assert message.endswith("instruction 0: aten::convolution.out: dilation [1, 1, 1] does not fit 2 spatial dims")


def test_groups_that_do_not_divide_the_channels(conv_pool):
    def edit(program):
        plan = _plan(program)
        plan.values.append(fb.EValue(fb.Int(2)))
        _give(plan, 0, GROUPS, len(plan.values) - 1)

    assert _error(edited(conv_pool, edit)).endswith(
        "aten::convolution.out: convolution: weight [2, 1, 3, 3] does not fit 1 channels in 2 groups"
    )


def test_a_tensor_without_memory_plan_is_refused_at_load(mlp):
    """Issue 14: a program whose tensors have no memory plan (lowered.pte) failed mid-run."""

    def edit(program):
        plan = _plan(program)
        plan.values[_call(plan, 0).args[-1]].val.allocation_info = None

    out = _call(_plan(Program.from_bytes(mlp).program), 0).args[-1]
    assert _error(edited(mlp, edit)).endswith(
        f"instruction 0: tensor value {out} has no memory plan (no allocation_info, no data_buffer_idx), "
        "which only method inputs and outputs may lack"
    )


def test_an_unplanned_output_gets_memory_of_its_own(mlp, small_mlp):
    """As in ExecuTorch, where the caller (its Python module) gives such outputs a buffer."""

    def edit(program):
        plan = _plan(program)
        plan.values[plan.outputs[0]].val.allocation_info = None

    model, (x,) = small_mlp
    method = Program.from_bytes(edited(mlp, edit)).load_method()
    (out,) = method(x.numpy())
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_list_items_of_the_wrong_type(conv_pool):
    plan = _plan(Program.from_bytes(conv_pool).program)
    tensors, an_int = _call(plan, 1).args[-1], _index_of(plan, fb.Int)
    first = plan.values[tensors].val.items[0]

    def edit(program):
        _plan(program).values[tensors].val.items = [first, an_int]

    assert _error(edited(conv_pool, edit)).endswith(
        f"value {tensors}: item {an_int} of this TensorList is a Int, expected Tensor"
    )


def test_an_int_list_item_that_is_not_an_int(conv_pool):
    plan = _plan(Program.from_bytes(conv_pool).program)
    an_int, a_bool = _index_of(plan, fb.Int), _index_of(plan, fb.Bool)

    def edit(program):
        plan = _plan(program)
        plan.values.append(fb.EValue(fb.IntList([an_int, a_bool])))
        _give(plan, 0, STRIDE, len(plan.values) - 1)

    n = len(plan.values)
    assert _error(edited(conv_pool, edit)).endswith(f"value {n}: item {a_bool} of this IntList is a Bool, expected Int")


def test_dim_order_of_another_rank(mlp):
    def edit(program):
        plan = _plan(program)
        plan.values[plan.inputs[0]].val.dim_order = b"\x00"

    assert "dim_order [0] is not a permutation of 2 dims" in _error(edited(mlp, edit))


def test_unbounded_dynamic_shapes_are_refused_as_executorch_does(mlp):
    def edit(program):
        plan = _plan(program)
        plan.values[plan.inputs[0]].val.shape_dynamism = fb.TensorShapeDynamism.DYNAMIC_UNBOUND

    assert "shape_dynamism 2 is neither static nor bounded" in _error(edited(mlp, edit))


def test_a_move_between_values_of_other_types(mlp):
    def edit(program):
        plan = _plan(program)
        plan.values.append(fb.EValue(fb.Int(0)))
        plan.chains[0].instructions.append(fb.Instruction(fb.MoveCall(plan.inputs[0], len(plan.values) - 1)))

    n = len(Program.from_bytes(mlp).program.execution_plan[0].values)
    assert _error(edited(mlp, edit)).endswith(f"moves value 0, a Tensor, into value {n}, a Int")


def test_a_jump_condition_that_is_not_a_bool(mlp):
    def edit(program):
        plan = _plan(program)
        plan.chains[0].instructions.append(fb.Instruction(fb.JumpFalseCall(plan.inputs[0], 0)))

    assert _error(edited(mlp, edit)).endswith("jump condition value 0 is a Tensor, expected a Bool")


def test_a_prim_op_result_of_another_kind_than_its_value(mlp):
    """truediv gives a float: storing it in an Int value would hand floats to kernels that take ints."""

    def edit(program):
        plan = _plan(program)
        base = len(plan.values)
        plan.values += [fb.EValue(fb.Int(1)), fb.EValue(fb.Int(2)), fb.EValue(fb.Int(0))]
        plan.operators.append(fb.Operator("executorch_prim::truediv", "Scalar"))
        call = fb.KernelCall(len(plan.operators) - 1, [base, base + 1, base + 2])
        plan.chains[0].instructions.insert(0, fb.Instruction(call))

    method = Program.from_bytes(edited(mlp, edit)).load_method()
    with pytest.raises(KernelError, match="instruction 0: executorch_prim::truediv.Scalar returned a float for a value "
                                          "of type Int"):
        method(np.zeros((2, 16), np.float32))
