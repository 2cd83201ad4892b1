"""The drop-assertions step: torch.export's calls that compute nothing are checked where they can be, then gone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.errors import StageError
from etbuild.lowering.assertions import is_assertion
from etbuild.pipeline import compile_exported
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program
from etbuild.stages.lower import lower

aten = torch.ops.aten


def _all_aten_overloads() -> list[torch._ops.OpOverload]:
    packets = [getattr(aten, n) for n in dir(aten)]
    return [getattr(p, o) for p in packets if isinstance(p, torch._ops.OpOverloadPacket) for o in p.overloads()]


def test_the_class_comes_from_torch_schemas():
    found = {str(op) for op in _all_aten_overloads() if is_assertion(op)}
    assert {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default", "aten._assert_async.msg",
            "aten.sym_constrain_range.default", "aten.sym_constrain_range_for_size.default", "aten._print.default",
            "aten._functional_assert_async.msg", "aten._functional_sym_constrain_range.default"} <= found
    assert not is_assertion(aten.copy_.default) and not is_assertion(aten.add.Tensor)
    assert not is_assertion(aten._make_dep_token.default)


class ToFloat(torch.nn.Module):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return ids.to(torch.float32) * 2


class Checked(torch.nn.Module):
    def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        n = i.item()
        torch._check(n >= 0)
        torch._check(n < x.shape[0])
        return x[n] + 1


def _operators(module: torch.nn.Module, *inputs: torch.Tensor, **kwargs: object) -> list[str]:
    exported = torch.export.export(module, inputs, **kwargs)
    plan = lower({"forward": exported}).program.execution_plan[0]
    return [f"{op.name}.{op.overload}" for op in plan.operators]


def test_tensor_metadata_assertions_around_dtype_conversions_are_not_emitted():
    exported = torch.export.export(ToFloat(), (torch.tensor([1, 2]),))
    assert any(n.target is aten._assert_tensor_metadata.default for n in exported.graph.nodes)
    assert _operators(ToFloat(), torch.tensor([1, 2])) == ["aten::_to_copy.out", "aten::mul.out"]


def test_assertions_on_symbolic_values_go_with_what_only_fed_them():
    x, i = torch.randn(6, 3), torch.tensor(4)
    exported = torch.export.export(Checked(), (x, i))
    assert any(n.target is aten._assert_scalar.default for n in exported.graph.nodes)
    lowered = compile_exported({"forward": exported})
    plan = read_program(lowered.pte)[0].execution_plan[0]
    assert [f"{op.name}.{op.overload}" for op in plan.operators] == [
        "aten::_local_scalar_dense.", "aten::select_copy.int_out", "aten::add.out"]
    (out,) = Program.from_bytes(lowered.pte).load_method("forward")(x.numpy(), i.numpy())
    np.testing.assert_allclose(out, (x[4] + 1).numpy())


class ConstantCheck(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert_async(self.scale.sum() == 1, "scale must sum to one")
        return x * self.scale


def test_an_assertion_on_constants_runs_at_build_time():
    exported = torch.export.export(ConstantCheck(), (torch.randn(3),))
    with pytest.raises(StageError) as err:
        lower({"forward": exported})
    message = str(err.value)
    assert message.startswith("lower step 'drop-assertions' (after decompose, fold-linear, fit-operator-set, "
                              "move-weight-permutes, fold-constants): aten._assert_async.msg fails at build time: ")
    assert "scale must sum to one" in message and "in method 'forward', node _assert_async" in message


class BranchChecked(torch.nn.Module):
    """torch.cond whose branch checks a value read from data (export records `_assert_scalar` in the branch)."""

    def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        def pick(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
            n = i.item()
            torch._check(n >= 0)
            torch._check(n < x.shape[0])
            return x[n] + 1

        def first(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
            return -x[0]

        return torch.cond(x.sum() > 0, pick, first, (x, i))


def test_assertions_in_cond_branches_are_dropped_too():
    x, i = torch.rand(6, 3), torch.tensor(4)
    exported = torch.export.export(BranchChecked(), (x, i))
    branches = [m for m in exported.graph_module.children() if isinstance(m, torch.fx.GraphModule)]
    assert any(n.target is aten._assert_scalar.default for m in branches for n in m.graph.nodes)
    lowered = compile_exported({"forward": exported})
    assert "aten::_assert_scalar" not in {op.name for op in read_program(lowered.pte)[0].execution_plan[0].operators}
    method = Program.from_bytes(lowered.pte).load_method("forward")
    np.testing.assert_allclose(method(x.numpy(), i.numpy())[0], (x[4] + 1).numpy())
    np.testing.assert_allclose(method(-x.numpy(), i.numpy())[0], x[0].numpy())
