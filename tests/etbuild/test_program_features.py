"""Control flow, dynamic shapes, mutable state and several methods: lowered, then run in our
runtime and (when installed) in ExecuTorch's, against eager torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.pipeline import compile_exported, compile_module
from etbuild.runtime import Program
from etbuild.runtime.format import program as fb
from tests.conftest import requires_executorch


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin() * 2, lambda x: x.cos() + 1, (x,))


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.full((3,), 0.5))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 2


class Reshape(torch.nn.Module):
    def forward(self, x):
        n = x.shape[0]
        return torch.relu(x.reshape(n * 3, 2)) + n


class EncodeDecode(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(6, 3)
        self.dec = torch.nn.Linear(3, 6)

    def encode(self, x):
        return torch.tanh(self.enc(x))

    def decode(self, z):
        return self.dec(z)


def _ops(pte: bytes, method: str = "forward") -> list[str]:
    plan = Program.from_bytes(pte).plan(method)
    out = []
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        out.append(f"{plan.operators[a.op_index].name}" if isinstance(a, fb.KernelCall) else type(a).__name__)
    return out


@pytest.fixture(scope="module")
def cond_pte() -> bytes:
    return compile_module(Cond(), (torch.randn(4),)).pte


def test_cond_inlines_both_branches_between_jumps(cond_pte):
    assert _ops(cond_pte) == [
        "aten::sum", "aten::gt", "JumpFalseCall", "aten::sin", "aten::mul", "MoveCall", "JumpFalseCall",
        "aten::cos", "aten::add", "MoveCall",
    ]
    plan = Program.from_bytes(cond_pte).plan("forward")
    first, second = (plan.chains[0].instructions[i].instr_args for i in (2, 6))
    assert (first.destination_instruction, second.destination_instruction) == (7, 10)
    assert plan.values[second.cond_value_index].val == fb.Bool(False)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_takes_the_branch_the_data_picks(cond_pte, sign):
    x = torch.ones(4) * sign
    (out,) = Program.from_bytes(cond_pte).load_method()(x.numpy())
    np.testing.assert_allclose(out, Cond()(x).numpy(), rtol=1e-6)


def test_mutable_state_persists_across_calls_from_its_initial_value():
    pte = compile_module(Counter(), (torch.randn(3),)).pte
    assert _ops(pte)[-1] == "aten::copy_"
    method, eager = Program.from_bytes(pte).load_method(), Counter()
    for k in range(3):
        x = torch.full((3,), float(k))
        np.testing.assert_allclose(method(x.numpy())[0], eager(x).numpy())


def _dynamic_reshape() -> bytes:
    batch = torch.export.Dim("batch", min=1, max=64)
    return compile_module(Reshape(), (torch.randn(4, 6),), dynamic_shapes={"x": {0: batch}}).pte


def test_dynamic_shapes_are_planned_at_the_bound_and_resized_per_call():
    pte = _dynamic_reshape()
    plan = Program.from_bytes(pte).plan("forward")
    x_value = plan.values[plan.inputs[0]].val
    assert (x_value.sizes, x_value.shape_dynamism) == ([64, 6], fb.TensorShapeDynamism.DYNAMIC_BOUND)
    assert "aten::sym_size" in _ops(pte) and "executorch_prim::mul" in _ops(pte)
    method = Program.from_bytes(pte).load_method()
    for n in (1, 5, 64):
        x = torch.randn(n, 6)
        np.testing.assert_allclose(method(x.numpy())[0], Reshape()(x).numpy(), rtol=1e-6)


def test_input_beyond_its_bound_is_rejected():
    from etbuild.errors import MethodInputError

    method = Program.from_bytes(_dynamic_reshape()).load_method()
    with pytest.raises(MethodInputError, match=r"input 0: shape \[65, 6\] exceeds the upper bound \[64, 6\]"):
        method(np.zeros((65, 6), np.float32))


def _two_methods() -> tuple[EncodeDecode, bytes]:
    from etbuild.stages.export import MethodModule

    torch.manual_seed(0)
    model = EncodeDecode().eval()
    eps = {
        "encode": torch.export.export(MethodModule(model, "encode"), (torch.randn(2, 6),)),
        "decode": torch.export.export(MethodModule(model, "decode"), (torch.randn(2, 3),)),
    }
    return model, compile_exported(eps).pte


def test_several_methods_share_one_file():
    model, pte = _two_methods()
    program = Program.from_bytes(pte)
    assert program.method_names == ["decode", "encode"]
    x = torch.randn(2, 6)
    z = program.load_method("encode")(x.numpy())[0]
    np.testing.assert_allclose(z, model.encode(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    y = program.load_method("decode")(z)[0]
    np.testing.assert_allclose(y, model.decode(torch.from_numpy(z)).detach().numpy(), rtol=1e-5, atol=1e-6)


@requires_executorch
def test_features_run_in_executorch(cond_pte, tmp_path):
    from executorch.runtime import Runtime

    def load(data: bytes, method: str = "forward"):
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.pte"
        path.write_bytes(data)
        return Runtime.get().load_program(path).load_method(method)

    cond = load(cond_pte)
    for sign in (1.0, -1.0):
        x = torch.ones(4) * sign
        torch.testing.assert_close(cond.execute([x])[0], Cond()(x))
    counter, eager = load(compile_module(Counter(), (torch.randn(3),)).pte), Counter()
    for k in range(3):
        x = torch.full((3,), float(k))
        torch.testing.assert_close(counter.execute([x])[0], eager(x))
    reshape = load(_dynamic_reshape())
    for n in (1, 5, 64):
        x = torch.randn(n, 6)
        torch.testing.assert_close(reshape.execute([x])[0], Reshape()(x))
    model, pte = _two_methods()
    x = torch.randn(2, 6)
    torch.testing.assert_close(load(pte, "encode").execute([x])[0], model.encode(x).detach(), rtol=1e-5, atol=1e-6)


class TupleInListOut(torch.nn.Module):
    def forward(self, pair, scale):
        a, b = pair
        return [a * scale, (a + b).sum(0), torch.stack([a, b])]


def test_tuple_inputs_and_list_outputs_are_flattened_in_order(tmp_path):
    torch.manual_seed(0)
    inputs = ((torch.randn(3, 4), torch.randn(3, 4)), torch.randn(4))
    pte = compile_module(TupleInListOut(), inputs).pte
    plan = Program.from_bytes(pte).plan("forward")
    assert (len(plan.inputs), len(plan.outputs)) == (3, 3)
    flat = [inputs[0][0], inputs[0][1], inputs[1]]
    expected = [t.numpy() for t in TupleInListOut()(*inputs)]
    outs = Program.from_bytes(pte).load_method()(*[t.numpy() for t in flat])
    for out, exp in zip(outs, expected):
        np.testing.assert_allclose(out, exp, rtol=1e-6)
