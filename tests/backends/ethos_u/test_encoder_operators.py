"""The operators of small transformer encoders: layer norm, attention's batched matmuls, multiplies by a
scalar, slices and selects, means over the sequence, a class token and a position table. Each TOSA graph
runs in the reference model against the quantized torch model and compiles with Vela for a U55 and a U85."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("tosa_serializer")
pytest.importorskip("tosa_reference_model")
pytest.importorskip("ethosu.vela")

from etbuild.backends.tosa.runtime.reference import ReferenceGraph  # noqa: E402
from tests.backends.ethos_u.support import int8_edges, lowered, only_edges_outside, steps_from_quantized  # noqa: E402


class Norm(nn.Module):
    """A linear layer over [B, T, C], a layer norm (some weights negative), another linear layer."""

    def __init__(self, dim: int = 24) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, dim), nn.LayerNorm(dim), nn.Linear(dim, 8)
        with torch.no_grad():
            self.norm.weight.uniform_(-1.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(self.fc1(x)))


class Attention(nn.Module):
    """Two-head self-attention written out: q @ kᵀ, a scalar multiply, softmax, @ v; or through
    scaled_dot_product_attention (which the npu-int8 mode writes out the same way)."""

    def __init__(self, sdpa: bool, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.qkv, self.proj, self.heads, self.sdpa = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads, sdpa

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            y = nn.functional.scaled_dot_product_attention(q, k, v)
        else:
            y = torch.softmax(q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Tokens(nn.Module):
    """A class token before the sequence and a position table added (ViT's embedding), a slice of the
    sequence, its mean, and the class token selected back out."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Linear(8, dim)
        self.token, self.position = nn.Parameter(torch.randn(1, 1, dim)), nn.Parameter(torch.randn(1, 7, dim) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([self.token.expand(x.shape[0], -1, -1), self.embed(x)], 1) + self.position
        return torch.cat([y[:, 0], y[:, 2:5].mean(1)], 1)


IDS = ["layer_norm", "attention", "sdpa", "tokens"]
CASES = [(Norm, (1, 6, 8)), (lambda: Attention(False), (1, 6, 16)), (lambda: Attention(True), (1, 6, 16)),
         (Tokens, (1, 6, 8))]


@pytest.mark.parametrize(("model", "shape"), CASES, ids=IDS)
def test_each_encoder_operator_is_within_one_step_of_the_quantized_model(model, shape) -> None:
    torch.manual_seed(0)  # the weights drawn here, not left to whatever the tests before consumed
    assert steps_from_quantized(model(), shape) <= 1


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
@pytest.mark.parametrize(("model", "shape"), CASES, ids=IDS)
def test_vela_compiles_each_encoder_operator(model, shape, target) -> None:
    torch.manual_seed(3)
    found = lowered(model(), (torch.randn(shape),), "ethos-u", target=target)
    assert len(found.processed) == 1 and only_edges_outside(found), found.report.outside


def test_the_layer_norm_table_keeps_every_row_within_one_step_over_a_wide_spread_of_variances() -> None:
    """Rows whose spread ranges from a thousandth of the widest (a deviation well under one input step) to
    the widest: the variance shifted into the int16 table's top range resolves them all alike."""
    torch.manual_seed(0)
    x = torch.randn(1, 16, 8) * torch.logspace(-3, 0, 16).reshape(1, 16, 1)
    found = lowered(Norm(), (x,), "tosa")
    q_in, q_out = int8_edges(found.converted, x)
    (out,) = ReferenceGraph(found.processed[0].blob).run([q_in])
    assert np.abs(out.astype(np.int32) - q_out).max() <= 1


def test_what_the_walk_cannot_take_stays_on_the_cpu_with_its_reason() -> None:
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            return nn.functional.layer_norm(y, y.shape[-2:]) + y[:, ::2].mean(1, keepdim=True) * -0.5

    torch.manual_seed(3)
    found = lowered(Odd(), (torch.randn(1, 6, 8),), "ethos-u", target="ethos-u55-128")
    reasons = {o.node: o.reason for o in found.report.outside}
    assert reasons["native_layer_norm"].startswith("a layer norm over other than the last dim")
    assert reasons["slice_1"] == "a slice with step 2"
    assert reasons["mul"] == "a multiply by a scalar that is not positive"


class Softmax(nn.Module):
    """Softmax over the last dim of attention-shaped scores."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2.0, dim=-1)


def _vela_sram_bytes(model: nn.Module, shape: tuple[int, ...]) -> float:
    from etbuild.backends.ethos_u.options import EthosUOptions
    from etbuild.backends.ethos_u.vela import compile_tosa

    torch.manual_seed(3)
    found = lowered(model, (torch.randn(shape),), "tosa")
    assert len(found.processed) == 1 and only_edges_outside(found), found.report.outside
    return compile_tosa(found.processed[0].blob, EthosUOptions("ethos-u85-256")).report["sram_memory_used"] * 1024


def test_vela_holds_no_int32_value_of_the_scores_shape_in_softmax() -> None:
    """Softmax's product runs as one Vela operator from int8 inputs (no int32 [4, 17, 17] value: 8,704
    bytes in NHCWB16) and its per-row values are flat (a [4, 17, 1] int32 value would take 4,352 bytes):
    SRAM holds the int8 input, the exp codes and the output (2,176 bytes each) and small rows."""
    assert _vela_sram_bytes(Softmax(), (1, 4, 17, 17)) <= 3 * 2176 + 1024


def test_softmax_holds_its_reciprocal_in_one_byte_per_row() -> None:
    """At the product Vela holds the exp codes and the output (4,096 bytes each) and 1/Σ as int8, one byte
    for each of the 128 rows, as ExecuTorch's flow does (an int16 1/Σ took 256: Whisper's attention peak)."""
    assert _vela_sram_bytes(Softmax(), (1, 4, 32, 32)) <= 2 * 4096 + 128


def test_softmax_multiplies_the_int8_exp_codes_by_an_int8_reciprocal_per_row() -> None:
    """The product is one MUL of two RESCALEs to int32: of the int8 exp codes ([1, 4, 17, 17], from a TABLE)
    and of the int8 1/Σ per row ([1, 4, 17, 1]); no int16 value of the scores' shape exists."""
    from tests.backends.ethos_u.test_rescales import operators, tensors

    torch.manual_seed(3)
    found = lowered(Softmax(), (torch.randn(1, 4, 17, 17),), "tosa")
    graph = found.processed[0].blob
    shapes, ops = tensors(graph), operators(graph)
    made = {out: (op, ins) for op, ins, outs in ops for out in outs}
    (product,) = [ins for op, ins, outs in ops if op == "MUL" and shapes[outs[0]][0] == [1, 4, 17, 17]]
    widened = [made[name] for name in product[:2]]
    assert [op for op, _ in widened] == ["RESCALE", "RESCALE"]
    assert [shapes[ins[0]] for _, ins in widened] == [([1, 4, 17, 17], "INT8"), ([1, 4, 17, 1], "INT8")]
    assert made[widened[0][1][0]][0] == "TABLE"
    assert ([1, 4, 17, 17], "INT16") not in shapes.values()


def test_vela_holds_one_int32_value_of_the_input_shape_in_layer_norm() -> None:
    """Layer norm over [32, 64]: x (2,048 bytes), x² as int16 (4,096) before its sum, then the int32 product
    (8,192) before the per-channel RESCALE and the int8 result; never x − zp or d held as int32 besides."""
    assert _vela_sram_bytes(nn.LayerNorm(64), (1, 32, 64)) <= 2048 + 8192 + 2048 + 512


def test_a_wide_layer_norm_of_rows_far_from_zero_is_within_one_step() -> None:
    """C = 2304 (C·Σx is shifted to stay within int32) and rows whose mean is far from their spread:
    the variance from the sums of x and x² is exact, so no cancellation."""
    torch.manual_seed(0)
    x = torch.randn(1, 4, 8) * 0.3 + 2.0
    model = nn.Sequential(nn.Linear(8, 2304), nn.LayerNorm(2304), nn.Linear(2304, 8))
    found = lowered(model, (x,), "tosa")
    q_in, q_out = int8_edges(found.converted, x)
    (out,) = ReferenceGraph(found.processed[0].blob).run([q_in])
    assert np.abs(out.astype(np.int32) - q_out).max() <= 1


@pytest.mark.parametrize("seed", [1066, 1129])
def test_a_layer_norm_weight_near_zero_beside_its_bias_is_within_one_step(seed: int) -> None:
    """These draws give one channel a γ of about 1e-4 beside a β of about 0.4: β in steps of γ·y was past
    the int32 accumulator's reach and clipped (7 and 11 steps off); that channel's scale now widens to hold it."""
    torch.manual_seed(seed)
    assert steps_from_quantized(Norm(), (1, 6, 8)) <= 1
