"""Layout copies dropped by moving their input into their out's bytes (etbuild.runtime.aliasing.Aliaser._try_move):
the same outputs, bit for bit, as with every copy made."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.runtime import Program
from etbuild.runtime.aliasing import Aliaser
from etbuild.runtime.binding import Binder, _noop
from tests.conftest import HAS_EXECUTORCH


class Scores(torch.nn.Module):
    """Attention scores: ExecuTorch's XNNPACK flow leaves the matmul's expand_copy of q and k outside the delegates."""

    def __init__(self) -> None:
        super().__init__()
        self.qk = torch.nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).view(1, 8, 2, 16).transpose(1, 2).split(8, -1)
        return torch.matmul(q, k.transpose(-1, -2)).softmax(-1)


@pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch (the interop oracle) is not installed")
def test_an_expand_to_its_own_shape_writes_into_its_out(monkeypatch, tmp_path: Path):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model, x = Scores().eval(), torch.randn(1, 8, 16)
    edge = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()])
    pte = tmp_path / "scores.pte"
    pte.write_bytes(edge.to_executorch().buffer)
    method = Program.load(pte).load_method()
    plan, objects = method.plan, method.values.objects
    calls = [ins.instr_args for ins in plan.chains[0].instructions]
    expands = [a.args for a in calls
               if hasattr(a, "op_index") and plan.operators[a.op_index].name == "aten::expand_copy"]
    assert any(objects[args[0]] is objects[args[-1]] for args in expands)  # an input that dies at its expand
    got = [method(x.numpy()) for _ in range(2)][-1]
    with monkeypatch.context() as m:  # every copy made
        m.setattr(Aliaser, "_try_move", lambda *_: None)
        m.setattr(Binder, "_fast_step", lambda *_: None)
        plain = Program.load(pte).load_method()
        assert not any(step is _noop for step in plain.steps)
        want = plain(x.numpy())
    assert len(got) == len(want) and all(a.tobytes() == b.tobytes() for a, b in zip(got, want))
    with torch.no_grad():
        np.testing.assert_allclose(got[0], model(x).numpy(), rtol=1e-5, atol=1e-6)
