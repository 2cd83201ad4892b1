"""Lowering: core ATen → folded → out-variant KernelCalls with the format's argument convention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.errors import StageError
from etbuild.lowering.out_variants import check_carried, copy_variant, operator_name, out_variant
from etbuild.runtime.format import program as fb
from etbuild.stages.lower import lower

aten = torch.ops.aten


def _lowered(module: torch.nn.Module, *inputs: torch.Tensor) -> fb.ExecutionPlan:
    return lower({"forward": torch.export.export(module.eval(), inputs)}).program.execution_plan[0]


def _calls(plan: fb.ExecutionPlan) -> list[tuple[str, list[str]]]:
    """Each call as (operator, [kind of each argument value])."""
    out = []
    for ins in plan.chains[0].instructions:
        op = plan.operators[ins.instr_args.op_index]
        kinds = [type(plan.values[i].val).__name__ for i in ins.instr_args.args]
        out.append((f"{op.name}.{op.overload}", kinds))
    return out


def _is_constant(plan: fb.ExecutionPlan, i: int) -> bool:
    v = plan.values[i].val
    return isinstance(v, fb.Tensor) and v.data_buffer_idx > 0


def test_linear_relu_lowers_to_addmm_with_a_prepacked_weight():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU())
    plan = _lowered(model, torch.randn(2, 6))
    assert _calls(plan) == [
        ("aten::addmm.out", ["Tensor", "Tensor", "Tensor", "Int", "Int", "Tensor", "Tensor"]),
        ("aten::relu.out", ["Tensor", "Tensor", "Tensor"]),
    ]
    bias, x, weight, beta, alpha, out, ret = plan.chains[0].instructions[0].instr_args.args
    assert _is_constant(plan, bias) and _is_constant(plan, weight) and not _is_constant(plan, x)
    assert plan.values[weight].val.sizes == [6, 4]  # stored transposed: no permute at run time
    assert (plan.values[beta].val.int_val, plan.values[alpha].val.int_val) == (1, 1)
    assert out == ret


class AddScalar(torch.nn.Module):
    def forward(self, x):
        return x + 2.5


def test_python_scalar_operand_becomes_a_0d_constant():
    plan = _lowered(AddScalar(), torch.randn(3))
    ((name, kinds),) = _calls(plan)
    assert (name, kinds) == ("aten::add.out", ["Tensor", "Tensor", "Int", "Tensor", "Tensor"])
    scalar = plan.values[plan.chains[0].instructions[0].instr_args.args[1]].val
    assert scalar.sizes == [] and scalar.data_buffer_idx > 0


class Views(torch.nn.Module):
    def forward(self, x):
        return x.view(4, 3).t() * 2


def test_views_become_copies():
    names = [name for name, _ in _calls(_lowered(Views(), torch.randn(3, 4)))]
    assert names == ["aten::view_copy.out", "aten::permute_copy.out", "aten::mul.out"]


class ExpandBias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(1, 4))

    def forward(self, x):
        return x + self.bias.expand(64, 4)


def test_folding_never_grows_constants():
    plan = _lowered(ExpandBias(), torch.randn(64, 4))
    assert "aten::expand_copy.out" in [name for name, _ in _calls(plan)]
    sizes = [ev.val.sizes for ev in plan.values if isinstance(ev.val, fb.Tensor) and ev.val.data_buffer_idx]
    assert sizes == [[1, 4]]


class MaxDim(torch.nn.Module):
    def forward(self, x):
        return torch.max(x, dim=1)


def test_multi_output_ops_pass_each_out_then_a_tensor_list():
    plan = _lowered(MaxDim(), torch.randn(3, 5))
    ((name, kinds),) = _calls(plan)
    assert name == "aten::max.dim_max"
    assert kinds == ["Tensor", "Int", "Bool", "Tensor", "Tensor", "TensorList"]
    args = plan.chains[0].instructions[0].instr_args.args
    assert plan.values[args[-1]].val.items == args[3:5]
    assert plan.outputs == args[3:5]


def test_out_variant_and_copy_variant_lookup():
    assert out_variant(aten.addmm.default) is aten.addmm.out
    assert out_variant(aten.slice_copy.Tensor) is aten.slice_copy.Tensor_out
    assert out_variant(aten.max.dim) is aten.max.dim_max
    assert out_variant(aten.full.default) is aten.full.out  # dtype & co. travel with the out tensor
    assert copy_variant(aten.view.default) is aten.view_copy.default
    assert copy_variant(aten.relu.default) is aten.relu.default
    assert operator_name(aten.addmm.out) == ("aten::addmm", "out")


def test_out_variants_that_leave_dtype_and_layout_to_the_out_tensor():
    assert out_variant(aten.full_like.default) is aten.full_like.out  # keeps memory_format, drops the rest
    assert out_variant(aten._to_copy.default) is aten._to_copy.out
    assert out_variant(aten.empty.memory_format) is aten.empty.out


def test_a_value_the_out_tensor_cannot_carry_is_an_error():
    result = torch.empty(2, dtype=torch.float16)
    check_carried({"self": None, "dtype": torch.float16, "layout": torch.strided}, aten._to_copy.out._schema, result)
    with pytest.raises(StageError) as err:
        check_carried({"dtype": torch.float32}, aten._to_copy.out._schema, result)
    assert str(err.value) == (
        "argument dtype=torch.float32 cannot be left to the out tensor of aten::_to_copy.out: the program's tensors "
        "are strided, on the CPU, contiguous and unpinned (the result is torch.float16)"
    )
    with pytest.raises(StageError, match="argument layout=torch.sparse_coo cannot be left"):
        check_carried({"layout": torch.sparse_coo}, aten._to_copy.out._schema, result)


class Like(torch.nn.Module):
    def forward(self, x):
        return torch.full_like(x, 2, dtype=torch.int32) + torch.zeros_like(x).long() + x.to(torch.float16).sum()


def test_creation_ops_honour_the_result_dtype():
    from etbuild.pipeline import compile_module
    from etbuild.runtime import Program

    x = torch.randn(2, 3)
    (out,) = Program.from_bytes(compile_module(Like(), (x,)).pte).load_method()(x.numpy())
    expected = Like()(x)
    assert str(out.dtype) == "float16" == str(expected.dtype).removeprefix("torch.")
    torch.testing.assert_close(torch.from_numpy(out), expected, rtol=1e-3, atol=1e-3)


class Tied(torch.nn.Module):
    """An embedding and an output projection sharing one table, as GPT-2-style models do."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 8)
        self.head = torch.nn.Linear(8, 64, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.embed(ids))


def test_a_tied_table_is_stored_once():
    lowered = lower({"forward": torch.export.export(Tied(), (torch.tensor([[1, 5, 7]]),))})
    plan = lowered.program.execution_plan[0]
    assert len(lowered.program.constant_segment.offsets) == 2  # the placeholder and the one table
    assert len(lowered.segments[0]) == 64 * 8 * 4
    assert "aten::permute_copy.out" in [name for name, _ in _calls(plan)]


def test_op_without_out_variant_is_a_stage_error():
    with pytest.raises(StageError, match="operator aten::_local_scalar_dense.default has no out-variant"):
        out_variant(aten._local_scalar_dense.default)


def test_inference_batch_norm_folds_into_the_convolution():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    x = torch.randn(1, 3, 8, 8)
    plan = _lowered(model, x)
    assert [name for name, _ in _calls(plan)] == ["aten::convolution.out", "aten::relu.out"]

    from etbuild.pipeline import compile_module
    from etbuild.runtime import Program

    (out,) = Program.from_bytes(compile_module(model, (x,)).pte).load_method()(x.numpy())
    torch.testing.assert_close(torch.from_numpy(out), model(x).detach(), rtol=1e-5, atol=1e-5)


class RelativeBias(torch.nn.Module):
    """Two attention layers gathering a bias from their own small table by the same index (Swin)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        index = torch.randint(0, 13, (20, 20))
        self.register_buffer("index0", index.clone())
        self.register_buffer("index1", index.clone())
        self.table0 = torch.nn.Parameter(torch.randn(13, 2))
        self.table1 = torch.nn.Parameter(torch.randn(13, 4))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        bias0 = self.table0[self.index0.view(-1)].view(20, 20, 2).permute(2, 0, 1)
        bias1 = self.table1[self.index1.view(-1)].view(20, 20, 4).permute(2, 0, 1)
        return torch.softmax(a + bias0, -1), torch.softmax(b + bias1, -1)


@pytest.mark.parametrize("backend", [None, "xnnpack"])
def test_a_gathered_bias_is_computed_at_run_time_when_storing_it_would_grow_the_program(backend):
    from etbuild.pipeline import compile_module
    from etbuild.recipe import BackendConfig
    from etbuild.runtime import Program

    model, a, b = RelativeBias(), torch.randn(2, 20, 20), torch.randn(4, 20, 20)
    compiled = compile_module(model, (a, b), backends=[BackendConfig(name=backend)] if backend else [])
    gathered = (2 + 4) * 20 * 20 * 4  # the two biases as float constants
    # one copy of the index (the constant pool stores equal bytes once) and the two tables
    assert len(compiled.pte) < 20 * 20 * 8 + gathered // 2
    got = Program.from_bytes(compiled.pte).load_method()(a.numpy(), b.numpy())
    for g, w in zip(got, model(a, b)):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-5, atol=1e-6)
