"""fold-linear: a linear layer on a transposed N-D input lowers as one matrix product, not a broadcast bmm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.pipeline import compile_module
from etbuild.recipe import BackendConfig
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program


class TokenMixing(torch.nn.Module):
    """A Linear over the token axis (MLP-Mixer's token mixing): its input is a transpose."""

    def __init__(self, tokens: int, channels: int, bias: bool = True) -> None:
        super().__init__()
        self.mix = torch.nn.Linear(tokens, 3 * tokens, bias=bias)
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(torch.relu(x).transpose(-1, -2))


def _operators(pte: bytes) -> list[str]:
    return [op.name for op in read_program(pte)[0].execution_plan[0].operators]


@pytest.mark.parametrize("shape", [(2, 5, 7), (2, 3, 5, 7), (1, 5, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_on_a_transposed_input_is_one_matrix_product(shape, bias):
    torch.manual_seed(0)
    model = TokenMixing(shape[-2], shape[-1], bias=bias).eval()
    x = torch.randn(*shape)
    pte = compile_module(model, (x,)).pte
    operators = _operators(pte)
    assert "aten::bmm" not in operators and "aten::expand_copy" not in operators
    assert ("aten::addmm" if bias else "aten::mm") in operators
    got = Program.from_bytes(pte).load_method()(x.numpy())[0]
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_batched_product_of_two_activations_stays_a_bmm():
    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            return q @ k.transpose(-1, -2)

    q, k = torch.randn(3, 4, 6), torch.randn(3, 5, 6)
    pte = compile_module(Attention(), (q, k)).pte
    assert "aten::bmm" in _operators(pte)
    got = Program.from_bytes(pte).load_method()(q.numpy(), k.numpy())[0]
    np.testing.assert_allclose(got, (q @ k.transpose(-1, -2)).numpy(), rtol=1e-5, atol=1e-6)


def test_xnnpack_takes_the_whole_token_mixing_layer_as_one_delegate():
    torch.manual_seed(0)
    model, x = TokenMixing(5, 7).eval(), torch.randn(2, 5, 7)
    compiled = compile_module(model, (x,), backends=[BackendConfig(name="xnnpack")])
    assert _operators(compiled.pte) == []  # every call inside the delegate: no expand left outside
    got = Program.from_bytes(compiled.pte).load_method()(x.numpy())[0]
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
