"""RESCALEs the TOSA walk leaves out: none for a multiply by a scalar (attention's 1/√d), none that would
give every int8 value back unchanged (Vela runs each RESCALE it cannot fold into a neighbour as an operator)."""

from __future__ import annotations

from collections import Counter

import flatbuffers
import numpy as np
import pytest
import torch
from flatbuffers.table import Table
from torch import nn

from etbuild.backends.tosa.rescale import keeps_int8, multiplier_shift

ts = pytest.importorskip("tosa_serializer")
pytest.importorskip("tosa_reference_model")

from tests.backends.ethos_u.support import lowered, steps_from_quantized  # noqa: E402


def _tables(table: Table, field: int) -> list[Table]:
    at = table.Offset(4 + 2 * field)
    start, count = table.Vector(at), table.VectorLen(at)
    return [Table(table.Bytes, table.Indirect(start + 4 * k)) for k in range(count)]


def _strings(table: Table, field: int) -> list[str]:
    at = table.Offset(4 + 2 * field)
    start = table.Vector(at)
    return [table.String(start + 4 * k).decode() for k in range(table.VectorLen(at))]


def operators(tosa: bytes) -> list[tuple[str, list[str], list[str]]]:
    """(op name, input names, output names) of each operator of the graph's main block (tosa.fbs:
    TosaGraph.regions[0].blocks[0].operators, each {op, attribute, inputs, outputs})."""
    buf = bytearray(tosa)
    root = Table(buf, flatbuffers.encode.Get(flatbuffers.packer.uoffset, buf, 0))
    block = _tables(_tables(root, 1)[0], 1)[0]
    found = []
    for op in _tables(block, 1):
        code = op.Get(flatbuffers.number_types.Uint32Flags, op.Pos + op.Offset(4))
        found.append((ts.Op(code).name, _strings(op, 3), _strings(op, 4)))
    return found


def tensors(tosa: bytes) -> dict[str, tuple[list[int], str]]:
    """Each tensor's (shape, DType name) in the main block (TosaBasicBlock.tensors, each {name, shape, type})."""
    buf = bytearray(tosa)
    root = Table(buf, flatbuffers.encode.Get(flatbuffers.packer.uoffset, buf, 0))
    found = {}
    for tensor in _tables(_tables(_tables(root, 1)[0], 1)[0], 2):
        name = tensor.String(tensor.Pos + tensor.Offset(4)).decode()
        at = tensor.Offset(6)
        start = tensor.Vector(at) if at else 0
        shape = [tensor.Get(flatbuffers.number_types.Int32Flags, start + 4 * k)
                 for k in range(tensor.VectorLen(at) if at else 0)]
        code = tensor.Get(flatbuffers.number_types.Uint32Flags, tensor.Pos + tensor.Offset(8))
        found[name] = (shape, ts.DType(code).name)
    return found


class ScaledScores(nn.Module):
    """Attention's scores written out: (q · 1/√d) @ kᵀ, softmax, @ v (the scale on q, as Whisper and BERT
    apply it), and a scale of one on the scores too; or the same without either multiply."""

    def __init__(self, scaled: bool = True, dim: int = 16) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.scaled = scaled

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.q(x) * 0.25 if self.scaled else self.q(x)
        scores = q @ self.k(x).transpose(-2, -1)
        return torch.softmax(scores * 1.0 if self.scaled else scores, dim=-1) @ self.v(x)


def test_a_scaled_query_is_within_one_step_of_the_quantized_model() -> None:
    assert steps_from_quantized(ScaledScores(), (1, 6, 16)) <= 1


def _op_counts(model: nn.Module) -> Counter[str]:
    torch.manual_seed(3)
    found = lowered(model, (torch.randn(1, 6, 16),), "tosa")
    return Counter(name for name, _, _ in operators(found.processed[0].blob))


def test_a_multiply_by_a_scalar_adds_no_operator() -> None:
    """Not the two RESCALEs of old (int8 → int32 and back, one standalone operator in Vela): the scaled
    codes are the query's own, and its quantize observed exactly the scaled range."""
    torch.manual_seed(0)
    scaled = ScaledScores()
    plain = ScaledScores(scaled=False)
    plain.load_state_dict(scaled.state_dict())
    assert _op_counts(scaled) == _op_counts(plain)


@pytest.mark.parametrize("scale", [1.0, 1 + 1e-7, 1 - 3e-7, 1 + 1 / 600])
def test_a_rescale_that_keeps_every_int8_value_is_recognised(scale: float) -> None:
    multiplier, shift = multiplier_shift(scale)
    d = np.arange(-255, 256, dtype=np.int64)
    kept = np.array_equal((d * multiplier + (1 << (shift - 1))) >> shift, d)  # TOSA's SINGLE_ROUND
    assert keeps_int8(scale) == kept


@pytest.mark.parametrize("scale", [1 + 1 / 500, 1 - 1 / 500, 0.5, 2.0])
def test_a_rescale_that_changes_some_int8_value_is_kept(scale: float) -> None:
    assert not keeps_int8(scale)


class EvenNorm(nn.Module):
    """A linear layer, a layer norm whose weights share one magnitude (some negative), another linear layer."""

    def __init__(self, dim: int = 24) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, dim), nn.LayerNorm(dim), nn.Linear(dim, 8)
        with torch.no_grad():
            self.norm.weight.copy_(torch.where(torch.arange(dim) % 3 == 0, -0.7, 0.7))
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(self.fc1(x)))


def test_a_layer_norm_whose_weights_share_a_magnitude_is_quantized_by_one_factor() -> None:
    """Its accumulator's channels have equal scales: the quantize is a per-tensor RESCALE, which Vela folds
    into the ADD before it (a per-channel one runs as an operator of its own)."""
    assert steps_from_quantized(EvenNorm(), (1, 6, 8)) <= 1
    torch.manual_seed(3)
    found = lowered(EvenNorm(), (torch.randn(1, 6, 8),), "tosa")
    graph = found.processed[0].blob
    shapes = {name: shape for name, (shape, _) in tensors(graph).items()}
    after_add = [ins for name, ins, _ in operators(graph) if name == "RESCALE" and ins[0] in
                 {outs[0] for op, _, outs in operators(graph) if op == "ADD"}]
    assert after_add and all(shapes[ins[1]] == [1] for ins in after_add)


@pytest.mark.parametrize("dim", [24, 160])
def test_a_layer_norm_multiplies_by_its_width_from_an_int8_constant_when_it_fits(dim: int) -> None:
    """C ≤ 127: an int8 constant (the MUL reads two int8 RESCALEs, which Vela folds); wider: int16."""
    assert steps_from_quantized(EvenNorm(dim), (1, 6, 8)) <= 1
    torch.manual_seed(3)
    graph = lowered(EvenNorm(dim), (torch.randn(1, 6, 8),), "tosa").processed[0].blob
    kinds = tensors(graph)
    widths = [kinds[ins[0]][1] for name, ins, _ in operators(graph) if name == "RESCALE" and ins[0].startswith("const")]
    assert widths == ["INT8" if dim <= 127 else "INT16"]


class BiasFreeNorm(nn.Module):
    """A linear layer, a layer norm without a bias (β = 0), another linear layer."""

    def __init__(self, dim: int = 24) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, dim), nn.LayerNorm(dim, bias=False), nn.Linear(dim, 8)
        with torch.no_grad():
            self.norm.weight.uniform_(-1.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(self.fc1(x)))


def test_a_layer_norm_without_a_bias_adds_one_zero_not_a_row_of_them() -> None:
    """The ADD stays (Vela folds the quantize's RESCALE into it on U85, not into a MUL of int32 values), but
    reads one zero: no row of constants is broadcast over the rows (each read from flash on a U55)."""
    assert steps_from_quantized(BiasFreeNorm(), (1, 6, 8)) <= 1
    for model, size in ((BiasFreeNorm(), 1), (EvenNorm(), 24)):
        torch.manual_seed(3)
        graph = lowered(model, (torch.randn(1, 6, 8),), "tosa").processed[0].blob
        kinds = tensors(graph)
        offsets = [ins[1] for name, ins, _ in operators(graph) if name == "ADD" and kinds[ins[0]][0] == [1, 6, 24]]
        assert [int(np.prod(kinds[o][0])) for o in offsets] == [size]
