"""Token ids outside [0, vocabulary) are a KernelError in every embedding our runtime runs, never a row read from
the end: the portable `aten::embedding`, the quantized tables (`embedding_byte`, `embedding_4bit`, their fast paths)
and programs delegated to XNNPACK, whose embeddings stay outside the delegate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.errors import KernelError
from etbuild.kernels.portable.index import embedding_out
from etbuild.kernels.quantized import embedding as quantized
from etbuild.pipeline import compile_module
from etbuild.recipe.config import BackendConfig
from etbuild.runtime import Program

ROWS, COLUMNS = 16, 8


@pytest.mark.parametrize("index", [-1, -ROWS, ROWS])
def test_portable_embedding_rejects_an_id_outside_the_table(index: int) -> None:
    weight = np.arange(ROWS * COLUMNS, dtype=np.float32).reshape(ROWS, COLUMNS)
    out = np.empty((1, 2, COLUMNS), np.float32)
    with pytest.raises(KernelError, match=f"index {index} is out of range"):
        embedding_out(weight, np.array([[3, index]], np.int64), -1, False, False, out)
    embedding_out(weight, np.array([[3, ROWS - 1]], np.int64), -1, False, False, out)
    np.testing.assert_array_equal(out[0], weight[[3, ROWS - 1]])


def _table(bits: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    width = COLUMNS * bits // 8
    return rng.integers(0, 256, (ROWS, width), dtype=np.uint8), rng.random((ROWS, 2), dtype=np.float32)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("index", [-1, ROWS])
def test_quantized_embeddings_reject_an_id_outside_the_table(bits: int, index: int) -> None:
    weight, scales = _table(bits)
    indices = np.array([[index]], np.int64)
    out = np.empty((1, 1, COLUMNS), np.float32)
    kernel = quantized.embedding_byte_out if bits == 8 else quantized.embedding_4bit_out
    with pytest.raises(KernelError, match=f"index {index} is out of range for a table of {ROWS} rows"):
        kernel(weight.view(np.int8) if bits == 8 else weight, scales, None, -128, 127, indices, out)
    fast = quantized._fast(bits, False)(weight, scales, None, -128, 127, indices, out)
    assert fast is not None  # the bound path a decode step takes checks every call
    with pytest.raises(KernelError, match=f"index {index} is out of range"):
        fast()
    indices[0, 0] = ROWS - 1
    fast()


class Embed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(ROWS, COLUMNS)
        self.head = torch.nn.Linear(COLUMNS, ROWS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.table(tokens))


@pytest.mark.parametrize("backends", [(), (BackendConfig("xnnpack"),)], ids=["portable", "xnnpack"])
def test_a_program_rejects_a_negative_token_id(tmp_path, backends) -> None:
    torch.manual_seed(0)
    model = Embed().eval()
    path = tmp_path / "embed.pte"
    path.write_bytes(compile_module(model, (torch.tensor([[1, 2]]),), backends=backends).pte)
    method = Program.load(path).load_method("forward")
    expected = model(torch.tensor([[1, ROWS - 1]])).detach().numpy()
    np.testing.assert_allclose(method(np.array([[1, ROWS - 1]], np.int64))[0], expected, rtol=1e-5, atol=1e-5)
    for bad in (-1, ROWS):
        with pytest.raises(KernelError, match=f"index {bad} is out of range"):
            method(np.array([[1, bad]], np.int64))
