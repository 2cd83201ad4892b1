"""Sigmoid, reciprocal square root, sine and cosine as XNNPACK's AVX512F microkernels compute them (exact.py): the
loops against float64 math, and the XNNPACK runtime's nodes against ExecuTorch's runtime bit for bit, on programs
lowered by ExecuTorch's partitioner and on graphs of one node in our blob format (odd lengths, the microkernels'
tails, specials, denormals, huge values)."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.runtime import loops
from tests.conftest import HAS_EXECUTORCH

F = np.float32
XNN = loops.exact()
needs_xnn = pytest.mark.skipif(XNN is None, reason="numba is not installed or the CPU has no AVX512F")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.full(x.shape, np.nan, F)
    XNN.sigmoid(x, out, XNN.EXP2_TABLE, np.empty_like(x))
    return out


def _rsqrt(x: np.ndarray) -> np.ndarray:
    out = np.full(x.shape, np.nan, F)
    XNN.rsqrt(x, out)
    return out


@needs_xnn
@pytest.mark.parametrize("n", [0, 1, 15, 17, 1536])
def test_the_loops_are_within_a_few_ulp_of_the_math(n: int) -> None:
    """σ within 2 ulp (of 1 − σ for x ≥ 0: the kernel rounds that subtraction), 1/√x within 2 ulp."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 8).astype(F)
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(_sigmoid(x), exact, rtol=3e-7, atol=3e-7)
    y = np.abs(x) + F(1e-3)
    np.testing.assert_allclose(_rsqrt(y), 1 / np.sqrt(y.astype(np.float64)), rtol=2.4e-7, atol=0)
    for fn, loop in ((np.sin, XNN.sin), (np.cos, XNN.cos)):  # a rational approximation: about 1e-6 absolute
        out = np.full(x.shape, np.nan, F)
        loop(x, out)
        np.testing.assert_allclose(out, fn(x.astype(np.float64)), rtol=0, atol=3e-6)


@needs_xnn
def test_in_place_and_specials() -> None:
    """out may be x; σ(±0) = ½, σ(NaN) and 1/√(−1) are NaN, 1/√(+∞) = 0, 1/√(±0) and 1/√denormal NaN (denormals
    read as zero, then 0·∞), a denormal σ result flushed to 0."""
    x = np.array([0, -0.0, np.nan, -100, 100], F)
    y = x.copy()
    XNN.sigmoid(y, y, XNN.EXP2_TABLE, np.empty_like(y))
    np.testing.assert_array_equal(y, _sigmoid(x))
    np.testing.assert_array_equal(y, [0.5, 0.5, np.nan, 0, 1])
    r = _rsqrt(np.array([np.inf, -1, 0, 1e-40, 4], F))
    np.testing.assert_array_equal(r, [0, np.nan, np.nan, np.nan, 0.5])


def _lowered(fn, n: int, path):  # noqa: ANN001, ANN202
    """x ↦ fn(x) on [1, n] float32 lowered by ExecuTorch's XNNPACK partitioner: ExecuTorch's and our method."""
    torch = pytest.importorskip("torch")
    from tests.backends.xnnpack.test_one_row import _lowered as lowered

    class Unary(torch.nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN202
            return fn(x)

    return lowered(Unary().eval(), torch.zeros(1, n), path)


def _inputs(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    if kind == "normal":
        return (rng.standard_normal((1, n)) * 6).astype(F)
    x = (rng.choice([-1, 1], (1, n)) * 10.0 ** rng.uniform(-45, 38.5, (1, n))).astype(F)
    x.reshape(-1)[:10] = [0, -0.0, np.inf, -np.inf, np.nan, 88, -88, 1e-40, -1e-40, 3e38][: min(n, 10)]
    return x


@pytest.mark.interop
@needs_xnn
@pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")
@pytest.mark.parametrize("op", ["sigmoid", "rsqrt", "silu"])
def test_nodes_give_executorchs_bits(op: str, tmp_path) -> None:
    """Lengths 1, 37 (tails of the 16- and 32-wide loops), 1536 (an 8da4w model's SwiGLU), normal and extreme
    inputs (every magnitude, ±0, ±∞, NaN, denormals): the same bits, NaNs as NaNs. silu is Sigmoid then Multiply
    (without denormal inputs: XNNPACK flushes x·σ(x) of a denormal x to zero, our Multiply node does not)."""
    torch = pytest.importorskip("torch")
    fn = {"sigmoid": torch.sigmoid, "rsqrt": torch.rsqrt, "silu": torch.nn.functional.silu}[op]
    rng = np.random.default_rng(5)
    for n in (1, 37, 1536):
        theirs, ours = _lowered(fn, n, tmp_path / f"{op}_{n}.pte")
        for kind in ("normal", "extreme"):
            x = _inputs(rng, n, kind)
            if op == "rsqrt" and kind == "normal":
                x = np.abs(x)
            if op == "silu":  # XNNPACK's Multiply flushes a denormal product too; our Multiply does not (yet)
                x[np.abs(x) < 1e-37] = 0  # (products of about half of x: normal above 1e-37)
            expected = theirs.execute([torch.from_numpy(x)])[0].numpy()
            got = np.asarray(ours(x)[0])
            same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
            assert same.all(), f"{op} n={n} {kind}: x {x[~same][:4]} ours {got[~same][:4]} ET {expected[~same][:4]}"


@pytest.mark.interop
@needs_xnn
@pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")
@pytest.mark.parametrize("op", ["Sin", "Cos", "Sigmoid", "ReciprocalSquareRoot"])
def test_one_node_graphs_give_executorchs_bits(op: str) -> None:
    """One node in our blob format (as our recipes' programs carry them: RoPE's Sin and Cos, SwiGLU's Sigmoid,
    RMSNorm's rsqrt) run by ExecuTorch's runtime and ours: lengths 1, 37, 256; angles of every size a position
    table reaches, normal values, and ±0, ±∞, NaN."""
    torch = pytest.importorskip("torch")
    from executorch.runtime import Runtime

    from etbuild.backends.xnnpack.format import graph as g
    from etbuild.runtime import Program
    from tests.backends.xnnpack.graphs import GraphBuilder, float_tensor

    rng = np.random.default_rng(11)
    for n in (1, 37, 256):
        gb = GraphBuilder()
        x, y = gb.tensor((1, n), flags=g.FLAG_EXTERNAL_INPUT), gb.tensor((1, n), flags=g.FLAG_EXTERNAL_OUTPUT)
        gb.node(op, input_id=x, output_id=y, flags=0)
        pte = gb.pte([float_tensor(1, n), float_tensor(1, n)])
        theirs, ours = Runtime.get().load_program(pte).load_method("forward"), Program(pte).load_method("forward")
        for scale in (1.0, 100.0, 1e4):
            x = (rng.standard_normal((1, n)) * scale).astype(F)
            x.reshape(-1)[:6] = [0, -0.0, np.inf, -np.inf, np.nan, 1e-40][: min(n, 6)]
            if op == "ReciprocalSquareRoot":
                x = np.abs(x)
            expected = theirs.execute([torch.from_numpy(x)])[0].numpy()
            got = np.asarray(ours(x)[0])
            same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
            assert same.all(), f"{op} n={n}: x {x[~same][:4]} ours {got[~same][:4]} ET {expected[~same][:4]}"
