"""etbuild.select.features: which optional runtime features a program needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.errors import InternalError, InvalidProgram
from etbuild.runtime import features
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program
from etbuild.select import Contents, collect, write_runtime
from etbuild.select.features import plan_features, program_features
from etbuild.select.selection import Selection
from etbuild.verify.trimmed import run_trimmed
from tests.etbuild.select.support import write_both

STATIC, BOUND = fb.TensorShapeDynamism.STATIC, fb.TensorShapeDynamism.DYNAMIC_BOUND


def tensor(memory_id: int = 1, scalar_type: int = fb.ScalarType.FLOAT, **kw: object) -> fb.EValue:
    """A planned tensor [2, 3] (memory_id 0: not planned)."""
    alloc = fb.AllocationDetails(memory_id, 0, 0) if memory_id else None
    return fb.EValue(fb.Tensor(scalar_type=scalar_type, sizes=[2, 3], allocation_info=alloc, **kw))


def plan(values: list[fb.EValue], instructions: list[object] = (), inputs: tuple[int, ...] = (0,)) -> fb.ExecutionPlan:
    """A plan whose one chain runs instructions; value 0 is the input, one planned buffer."""
    chain = fb.Chain(instructions=[fb.Instruction(a) for a in instructions])
    return fb.ExecutionPlan(
        name="forward", values=values, inputs=list(inputs), outputs=[len(values) - 1], chains=[chain],
        operators=[fb.Operator("aten::relu", "out")], non_const_buffer_sizes=[0, 64],
    )


EXTERNAL = fb.ExtraTensorInfo(fully_qualified_name="w", location=fb.TensorDataLocation.EXTERNAL)
RELU = fb.KernelCall(0, [0, 1])
RELU_02 = fb.KernelCall(0, [0, 2])
CASES = {
    "straight": ([tensor(), tensor()], [RELU], (0,), set()),
    "CONTROL_FLOW": ([tensor(), tensor(), fb.EValue(fb.Bool(True))], [fb.JumpFalseCall(2, 1), RELU], (0,), set()),
    # a delegate's named data may be in a data file: only its backend knows its keys
    "DELEGATES": ([tensor(), tensor()], [fb.DelegateCall(0, [0, 1])], (0,), {"EXTERNAL_DATA"}),
    "DIM_ORDER": ([tensor(dim_order=b"\x01\x00"), tensor()], [RELU], (0,), set()),
    "DTYPE_PROMOTION": ([tensor(), tensor(scalar_type=fb.ScalarType.DOUBLE)], [RELU], (0,), set()),
    "DYNAMIC_SHAPES": ([tensor(shape_dynamism=BOUND), tensor()], [RELU], (0,), {"LIVE_VALUES"}),
    "EXTERNAL_DATA": ([tensor(), tensor(memory_id=0, extra_tensor_info=EXTERNAL), tensor()], [RELU_02], (0,), set()),
    "LIVE_VALUES": ([tensor(memory_id=0), tensor()], [RELU], (0,), set()),
    "MUTABLE_STATE": ([tensor(), tensor(data_buffer_idx=1)], [RELU], (0,), set()),
    "SCALAR_INPUTS": ([tensor(), fb.EValue(fb.Int(2)), tensor()], [RELU_02], (0, 1), {"LIVE_VALUES"}),
    "VALUE_LISTS": ([tensor(), fb.EValue(fb.IntList([2, 3])), tensor()], [RELU_02], (0,), set()),
}


@pytest.mark.parametrize("name", CASES)
def test_each_feature_is_found_from_what_needs_it(name):
    values, instructions, inputs, also = CASES[name]
    expected = ({name} if name != "straight" else set()) | also
    assert plan_features(plan(values, instructions, inputs)) == expected


def test_a_call_reading_only_constants_is_preloaded():
    """A dequantize of a constant (an int8 weight) runs once at load: PRELOAD."""
    weight = fb.EValue(fb.Tensor(scalar_type=fb.ScalarType.CHAR, sizes=[2, 3], data_buffer_idx=1))
    values = [tensor(), weight, fb.EValue(fb.Double(0.1)), fb.EValue(fb.Int(0)), fb.EValue(fb.Int(-128)),
              fb.EValue(fb.Int(127)), fb.EValue(fb.Int(fb.ScalarType.CHAR)), tensor()]
    dequantize = fb.KernelCall(1, [1, 2, 3, 4, 5, 6, 7])
    p = plan(values, [dequantize])
    p.operators.append(fb.Operator("quantized_decomposed::dequantize_per_tensor", "out"))
    p.outputs = [0]
    assert plan_features(p) == {"PRELOAD", "DTYPE_PROMOTION"}  # int8 in, float out


def test_every_runtime_feature_has_a_test():
    assert set(CASES) - {"straight"} | {"MEMORY_LEVELS", "PRELOAD"} == set(features.NAMES)


def test_more_than_one_memory_buffer_needs_memory_levels():
    p = plan([tensor(), tensor(memory_id=2)], [RELU])
    p.non_const_buffer_sizes = [0, 64, 64]
    assert plan_features(p) == {"MEMORY_LEVELS"}


@pytest.mark.parametrize("scalar_type", [fb.ScalarType.FLOAT, fb.ScalarType.DOUBLE])
def test_calls_in_one_native_float_dtype_need_no_promotion(scalar_type):
    values = [tensor(scalar_type=scalar_type), tensor(scalar_type=scalar_type)]
    assert plan_features(plan(values, [RELU])) == set()


@pytest.mark.parametrize("scalar_type", [fb.ScalarType.HALF, fb.ScalarType.LONG, fb.ScalarType.BOOL])
def test_calls_in_other_dtypes_need_promotion(scalar_type):
    values = [tensor(scalar_type=scalar_type), tensor(scalar_type=scalar_type)]
    assert plan_features(plan(values, [RELU])) == {"DTYPE_PROMOTION"}


def test_a_program_needs_what_any_of_its_methods_needs():
    two = fb.Program(execution_plan=[plan([tensor(), tensor()], [RELU]), plan([tensor(memory_id=0), tensor()], [RELU])])
    assert program_features(two) == ("LIVE_VALUES",)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_both(tmp_path_factory.mktemp("features"))


def test_real_programs(work):
    """The MLP is straight-line kernel calls on planned tensors; cat takes a TensorList."""
    assert program_features(read_program((work / "mlp.pte").read_bytes())[0]) == ()
    assert collect(work / "mlp.pte").features == ()
    assert collect(work / "tiny.pte").features == ("VALUE_LISTS",)


def test_selections_carry_and_merge_features(work):
    mlp, tiny = collect(work / "mlp.pte"), collect(work / "tiny.pte")
    assert mlp.union([tiny]).features == ("VALUE_LISTS",)
    assert Selection.from_dict(tiny.to_dict()).features == ("VALUE_LISTS",)


def test_a_runtime_without_a_needed_feature_names_it(work):
    kernels = collect(work / "tiny.pte").names
    runtime = write_runtime(Contents(kernels, ()), work / "no-lists", source="tiny without lists")
    assert runtime.features == ()
    with pytest.raises(InvalidProgram) as err:
        run_trimmed(runtime.root, work / "tiny.pte", work / "tiny.in.npz", work / "tiny.out.npz")
    assert str(err.value) == (
        f"the trimmed runtime {runtime.root}: {work / 'tiny.pte'}: EValue.val: TensorList needs a runtime feature "
        "this trimmed runtime lacks (etbuild select builds the runtime a program needs)"
    )


def test_code_behind_an_unused_feature_does_not_ship(work):
    runtime = write_runtime(Contents(collect(work / "mlp.pte").names, ()), work / "mlp-only", source="mlp")
    shipped = "".join(p.read_text() for p in runtime.paths)
    for gone in ("is_jump", "bounded", "list_items", "memory.json", "mutable_data_segments", "control_flow"):
        assert gone not in shipped, gone
    assert not (runtime.package / "runtime" / "control_flow.py").exists()


def test_unknown_features_are_refused(work):
    with pytest.raises(InternalError, match="unknown runtime features"):
        Contents((), ("TELEPORT",))
