"""The XNNPACK runtime's one-row FullyConnected loops (a decode step; ops/gemm.py): XNNPACK's qd8 × int4 product
(qd8.py, compiled.qd8_qb4w_matvec) against a numpy reference and the runtime's float path, the
float FMA loop over a filter packed in tiles (compiled.tiled_matvec), and the bits of both against ExecuTorch's
runtime on programs lowered by ExecuTorch."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime import loops, qd8
from etbuild.backends.xnnpack.runtime.ops.gemm import FullyConnected
from etbuild.backends.xnnpack.runtime.values import QuantizedRows
from tests.backends.xnnpack.graphs import DT, GraphBuilder, fc_graph
from tests.conftest import HAS_EXECUTORCH

F = np.float32
LOOPS = loops.compiled()
needs_loops = pytest.mark.skipif(LOOPS is None, reason="numba is not installed")
IN, OUT = g.FLAG_EXTERNAL_INPUT, g.FLAG_EXTERNAL_OUTPUT


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 numbers cut to bf16 ones (XNNPACK's block scales)."""
    return (x.view(np.uint32) >> 16 << 16).view(F)


def _product(weights: np.ndarray, scales: np.ndarray, codes: np.ndarray, zero: float, scale: float,
             bias: np.ndarray) -> np.ndarray:
    """The loop's output for codes (K,) unsigned and weights (K, N): its buffers set up and one call."""
    f = qd8.int4_filter(QuantizedRows(weights.astype(np.int8), scales))
    assert f is not None
    n = weights.shape[1]
    out = np.full(n, np.nan, F)
    LOOPS.qd8_qb4w_matvec(f.nibbles, f.scales, f.ksum, codes.astype(np.int32), np.array([zero, scale], F),
                          bias, np.empty(n, np.int32), np.empty(n, np.int16), np.empty(n, np.int16), out)
    return out


@needs_loops
@pytest.mark.parametrize(("k", "n", "group"), [(64, 37, 32), (96, 5, 96), (48, 3, 48), (128, 33, 16), (16, 1, 16)])
def test_the_loop_matches_the_block_sums_in_float64(k: int, n: int, group: int) -> None:
    """Odd N, one block or many, of 16 inputs (one int16 chunk) or more: the product is
    input scale · Σ_b scale_b · Σ_k (u_k − zero)·w_k + bias within float32 rounding."""
    rng = np.random.default_rng(k * n)
    weights = rng.integers(-8, 8, (k, n))
    scales = _bf16((rng.random((k // group, n)) * 0.02 + 1e-3).astype(F))
    codes, zero = rng.integers(0, 256, k), float(rng.integers(0, 256))
    bias = rng.standard_normal(n).astype(F)
    out = _product(weights, scales, codes, zero, 0.03, bias)
    blocks = ((codes - zero)[:, None] * weights).reshape(k // group, group, n).sum(axis=1)
    expected = 0.03 * (blocks * scales.astype(np.float64)).sum(axis=0) + bias
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5 * np.abs(expected).max())


@needs_loops
@pytest.mark.parametrize("extreme", ["largest", "smallest", "mixed"])
def test_the_integer_sums_are_exact_at_the_extremes(extreme: str) -> None:
    """Codes 255 and weights 7 or −8 everywhere: the 16-bit partial sums (16 · 255 · 15) wrap and come back
    exact. With unit scales, no zero point and no bias the output is the integer sum itself."""
    k, n = 64, 40
    rng = np.random.default_rng(1)
    weights = {"largest": np.full((k, n), 7), "smallest": np.full((k, n), -8),
               "mixed": rng.choice([-8, 7], (k, n))}[extreme]
    codes = np.full(k, 255) if extreme != "mixed" else rng.choice([0, 255], k)
    out = _product(weights, np.ones((2, n), F), codes, 0.0, 1.0, np.zeros(n, F))
    np.testing.assert_array_equal(out, (codes[:, None] * weights).sum(axis=0).astype(F))


@needs_loops
def test_the_codes_rounding_gives_the_rows_bits_and_its_codes() -> None:
    """snap_row_qdint8_codes rounds a row as snap_rows_qdint8 does and keeps codes + 128, zero point + 128 and
    the scale such that row = (code − zero)·scale within a rounding; a row of zeros has scale 1."""
    rng = np.random.default_rng(2)
    for row in (rng.standard_normal(50).astype(F) * 3, np.abs(rng.standard_normal(7)).astype(F), np.zeros(4, F)):
        plain, kept = row.reshape(1, -1).copy(), row.copy()
        codes, params = np.empty(len(row), np.int32), np.empty(2, F)
        LOOPS.snap_rows_qdint8(plain)
        LOOPS.snap_row_qdint8_codes(kept, codes, params)
        np.testing.assert_array_equal(kept, plain[0])
        assert codes.min() >= 0 and codes.max() <= 255
        np.testing.assert_allclose((codes - params[0]) * params[1], kept, rtol=1e-6, atol=1e-7)
    assert params[1] == 1


def test_packed_ksum_sums_sixteen_inputs_at_a_time() -> None:
    """−Σ scale·Σ code accumulated in float32 chunk by chunk (the packing's order), equal to the exact sum within
    rounding; a block that is not a multiple of 16 inputs has no int4 form."""
    rng = np.random.default_rng(3)
    codes, scales = rng.integers(-8, 8, (96, 7)), _bf16((rng.random((3, 7)) + 0.5).astype(F))
    ksum = qd8.packed_ksum(codes, scales)
    expected = np.zeros(7, F)
    for start in range(0, 96, 16):
        expected = expected - codes[start:start + 16].sum(axis=0).astype(F) * scales[start // 32]
    np.testing.assert_array_equal(ksum, expected)
    np.testing.assert_allclose(ksum, -(codes.reshape(3, 32, 7).sum(axis=1) * scales).sum(axis=0), rtol=1e-6)
    assert qd8.int4_filter(QuantizedRows(codes[:88].astype(np.int8), scales[:4])) is None  # blocks of 22
    assert qd8.int4_filter(QuantizedRows(codes.astype(np.int8), scales + F(1e-3))) is None  # not bf16


@needs_loops
@pytest.mark.parametrize("n", [3, 128, 300])
def test_the_fma_loop_is_a_sequence_of_fused_multiply_adds_from_the_bias(n: int) -> None:
    """out = bias, then out += x[k]·w[k] for k ascending, each rounded once (emulated: the float64 product of two
    float32 numbers is exact, and its sum with a float32 rounds to float32 as an FMA does but in rare ties), over
    filters of less than a tile, one tile and a part tile."""
    rng = np.random.default_rng(8)
    k = 200
    w, x, bias = (rng.standard_normal(s).astype(F) for s in ((k, n), k, n))
    out = np.empty(n, F)
    LOOPS.tiled_matvec(LOOPS.pack_tiles(w), x, bias, out)
    expected = bias.copy()
    for j in range(k):
        expected = (expected.astype(np.float64) + np.float64(x[j]) * w[j].astype(np.float64)).astype(F)
    np.testing.assert_array_equal(out, expected)


@needs_loops
@pytest.mark.parametrize(("n", "k"), [(129, 77), (1, 1), (0, 5), (3, 0), (512, 784)])
def test_row_dots_against_float64(n: int, k: int) -> None:
    """The one-row loop through a filter kept as [N, K] (compiled.row_dots): bias + each filter row's dot product
    with x, odd and empty shapes, within float32 rounding of the float64 sums (its sums are reassociated)."""
    rng = np.random.default_rng(n * 1000 + k)
    w, x, bias = (rng.standard_normal(shape).astype(F) for shape in ((n, k), k, n))
    out = np.full(n, np.nan, F)
    LOOPS.row_dots(w, x, bias, out)
    expected = w.astype(np.float64) @ x.astype(np.float64) + bias
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max(initial=0))))


def _dynamic_int4_graph(rng: np.random.Generator, rows: int, n: int, k: int) -> tuple[GraphBuilder, np.ndarray]:
    """Convert fp32 → qdint8, then FullyConnected through a qbint4 filter (blocks of 32) with a bias."""
    codes = rng.integers(-8, 8, size=(n, k))
    packed = ((codes[:, 0::2] + 8) | ((codes[:, 1::2] + 8) << 4)).astype(np.uint8)
    bf16 = ((rng.random((n, k // 32)).astype(F) * 0.05 + 0.01).view(np.uint32) >> 16).astype(np.uint16)
    gb = GraphBuilder()
    x = gb.tensor((rows, k), flags=IN)
    q = gb.tensor((rows, k), DT.QDINT8, quant=g.PerTokenDynamicQuant(1))
    w = gb.tensor((n, k), DT.QBINT4, data=packed,
                  quant=g.PerChannelGroupQuant([], 0, 32, gb.constant(bf16), n * k // 32))
    bias = gb.tensor((n,), data=rng.standard_normal(n).astype(F))
    out = gb.tensor((rows, n), flags=OUT)
    gb.node("Convert", input_id=x, output_id=q)
    gb.node("FullyConnected", input1_id=q, filter_id=w, bias_id=bias, output_id=out)
    return gb, rng.standard_normal((3, k)).astype(F)


@needs_loops
@pytest.mark.parametrize("vnni", [True, False])
def test_every_row_reads_the_codes_and_holds_no_float_filter(vnni: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FullyConnected from a qdint8 Convert through an int4 filter reads the Convert's codes (XNNPACK's integer
    product) at any number of rows, on AVX512-VNNI's tiles and on the portable loop: several rows give each row's
    bits alone, within float32 rounding of the float product, new inputs read call after call; the op keeps
    neither a float32 filter nor int8 codes (a 4-bit weight's float form is 8× its bytes)."""
    if not vnni:
        monkeypatch.setattr(qd8, "vnni", lambda: None)
    elif qd8.vnni() is None:
        pytest.skip("a CPU without AVX512-VNNI")
    n, k = 45, 96
    one, data = _dynamic_int4_graph(np.random.default_rng(6), 1, n, k)
    three, _ = _dynamic_int4_graph(np.random.default_rng(6), 3, n, k)
    handle, batch = one.handle(), np.empty((3, n), F)
    three_handle = three.handle()
    for h in (handle, three_handle):
        (fc,) = [op for op in h.graph.ops if isinstance(op, FullyConnected)]
        assert fc.codes is not None and fc.packed is None and fc.rows is None
        assert (fc.int4.tiles is not None) == vnni
    for scale in (20.0, 1.0):
        three_handle.execute([data * F(scale), batch])
        for r in range(3):
            y = np.empty((1, n), F)
            handle.execute([data[r : r + 1] * F(scale), y])
            np.testing.assert_array_equal(y[0], batch[r])
    values = three_handle.graph.values.values()
    (w,) = [v.constant for v in values if v.weight is not None]
    (bias,) = [v.constant for v in values if v.is_constant and v.dims == (n,)]
    q = data.copy()
    LOOPS.snap_rows_qdint8(q)  # the rows the Convert rounds: the product is exact but for float32 rounding
    expected = q.astype(np.float64) @ w.T.astype(np.float64) + bias
    np.testing.assert_allclose(batch, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def _lowered(model, example, path):  # noqa: ANN001, ANN202
    """model exported and lowered by ExecuTorch's XNNPACK partitioner into path; ExecuTorch's and our method."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    from etbuild.runtime import Program

    exported = torch.export.export(model, (example,))
    path.write_bytes(to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    return Runtime.get().load_program(str(path)).load_method("forward"), Program.load(path).load_method("forward")


@pytest.mark.interop
@pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")
def test_a_float_linear_of_few_outputs_gives_executorchs_bits(tmp_path) -> None:
    """512 → 1 (a norm's mean as a product) and 512 → 37 in float32: one row at a time our runtime's outputs
    equal ExecuTorch's runtime's bit for bit (BLAS's order gives them rarely)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    rng = np.random.default_rng(9)
    for n in (1, 37):
        theirs, ours = _lowered(torch.nn.Linear(512, n).eval(), torch.randn(1, 512), tmp_path / f"f32_{n}.pte")
        for _ in range(8):
            x = rng.standard_normal((1, 512)).astype(F)
            np.testing.assert_array_equal(np.asarray(ours(x)[0]), theirs.execute([torch.from_numpy(x)])[0].numpy())


@pytest.mark.interop
@pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")
def test_an_8da4w_program_gives_executorchs_bits(tmp_path) -> None:
    """Two 8da4w linears (export_llm's quantization: torchao, groups of 32) lowered by ExecuTorch's XNNPACK
    partitioner: one row at a time, and five rows at once (a prefill), our runtime's outputs equal ExecuTorch's
    runtime's bit for bit."""
    torch = pytest.importorskip("torch")
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 96), torch.nn.Linear(96, 40)).eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    theirs, ours = _lowered(model, torch.randn(1, 128), tmp_path / "8da4w.pte")
    rng = np.random.default_rng(7)
    for scale in (0.1, 1.0, 30.0):
        for _ in range(4):
            x = (rng.standard_normal((1, 128)) * scale).astype(F)
            expected = theirs.execute([torch.from_numpy(x)])[0].numpy()
            np.testing.assert_array_equal(np.asarray(ours(x)[0]), expected)
    theirs, ours = _lowered(model, torch.randn(5, 128), tmp_path / "8da4w_rows.pte")
    for scale in (0.1, 30.0):
        x = (rng.standard_normal((5, 128)) * scale).astype(F)
        np.testing.assert_array_equal(np.asarray(ours(x)[0]), theirs.execute([torch.from_numpy(x)])[0].numpy())


@pytest.mark.parametrize(("k", "n"), [(70, 100), (784, 512), (1, 65), (0, 90), (70, 64)])
def test_a_one_row_program_keeps_a_float_filter_in_tiles(k: int, n: int) -> None:
    """A program whose input is one row keeps a float filter as tiles of 128 outputs (numba's loops on) and takes
    XNNPACK's FMA sequence through them: the same numbers as the product of one row within float32 rounding, the
    fused clamp applied, new inputs read call after call; and more rows than the program declared (a dynamic batch)
    still multiply through the same tiles."""
    gb, w, b = fc_graph(k, n, rows=1, seed=k + n)
    handle = gb.handle()
    (fc,) = [op for op in handle.graph.ops if isinstance(op, FullyConnected)]
    if LOOPS is not None:
        assert fc.tiles is not None and fc.packed is None and fc.tiles.shape == (-(-n // 128), k, 128)
    rng = np.random.default_rng(n)
    for rows in (1, 1, 1, 3):
        x = rng.standard_normal((rows, k)).astype(F)
        y = np.full((rows, n), np.nan, F)
        handle.execute([x, y])
        expected = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(expected).max()))


def test_a_program_of_more_rows_keeps_the_filter_by_output_and_few_outputs_as_k_by_n() -> None:
    """More rows than one: a filter of more than FEW_OUTPUTS outputs is kept as [N, K] (row_dots for one row) with
    its transpose for BLAS, the same memory; a filter of few outputs as [K, N] (XNNPACK's FMA loop for one row)."""
    (fc,) = [op for op in fc_graph(70, 100, rows=2)[0].handle().graph.ops if isinstance(op, FullyConnected)]
    if LOOPS is not None:
        assert fc.tiles is None and fc.by_output.flags.c_contiguous and fc.by_output.shape == (100, 70)
        assert np.shares_memory(fc.packed, fc.by_output) and fc.packed.shape == (70, 100)
    (fc,) = [op for op in fc_graph(70, 64, rows=2)[0].handle().graph.ops if isinstance(op, FullyConnected)]
    assert fc.tiles is None and fc.by_output is None and fc.packed.flags.c_contiguous and fc.packed.shape == (70, 64)


def _int4_filter(gb: GraphBuilder, rng: np.random.Generator, n: int, k: int) -> int:
    codes = rng.integers(-8, 8, size=(n, k))
    packed = ((codes[:, 0::2] + 8) | ((codes[:, 1::2] + 8) << 4)).astype(np.uint8)
    bf16 = ((rng.random((n, k // 32)).astype(F) * 0.05 + 0.01).view(np.uint32) >> 16).astype(np.uint16)
    return gb.tensor((n, k), DT.QBINT4, data=packed, quant=g.PerChannelGroupQuant([], 0, 32, gb.constant(bf16),
                                                                                 n * k // 32))


def _two_layers(rows: int, apart: bool) -> GraphBuilder:
    """Two qd8 × int4 layers: 64 → 96 → 32 one after the other (the second Convert reads the first product), or
    64 → 96 and 64 → 32 with both Converts, of two inputs, before either product (their codes needed together)."""
    rng = np.random.default_rng(11)
    gb = GraphBuilder()
    x = gb.tensor((rows, 64), flags=IN)
    x2 = None if apart else gb.tensor((rows, 64), flags=IN)
    q1 = gb.tensor((rows, 64), DT.QDINT8, quant=g.PerTokenDynamicQuant(1))
    w1, w2 = _int4_filter(gb, rng, 96, 64), _int4_filter(gb, rng, 32, 96 if apart else 64)
    y1 = gb.tensor((rows, 96), flags=0 if apart else OUT)
    q2 = gb.tensor((rows, 96 if apart else 64), DT.QDINT8, quant=g.PerTokenDynamicQuant(1))
    out = gb.tensor((rows, 32), flags=OUT)
    gb.node("Convert", input_id=x, output_id=q1)
    if apart:
        gb.node("FullyConnected", input1_id=q1, filter_id=w1, bias_id=g.NO_ID, output_id=y1)
        gb.node("Convert", input_id=y1, output_id=q2)
    else:
        gb.node("Convert", input_id=x2, output_id=q2)
        gb.node("FullyConnected", input1_id=q1, filter_id=w1, bias_id=g.NO_ID, output_id=y1)
    gb.node("FullyConnected", input1_id=q2, filter_id=w2, bias_id=g.NO_ID, output_id=out)
    return gb


@needs_loops
@pytest.mark.parametrize("apart", [True, False])
def test_codes_of_several_rows_share_a_bank_only_when_their_lives_are_apart(apart: bool) -> None:
    """The codes of a prompt's rows: two Converts whose codes are never needed at the same time share one bank,
    two whose codes are (both Converts before both products) get one each; either way four rows at once give each
    row's bits alone."""
    four, one = _two_layers(4, apart).handle(), _two_layers(1, apart).handle()
    products = [op for op in four.graph.ops if isinstance(op, FullyConnected)]
    assert all(op.codes is not None for op in products)
    assert (products[0].codes.bank is products[1].codes.bank) == apart
    rng = np.random.default_rng(2)
    ins = [rng.standard_normal((4, 64)).astype(F) * F(3) for _ in range(1 if apart else 2)]
    outs = [np.empty((4, 96), F), np.empty((4, 32), F)][1 if apart else 0:]
    four.execute([*ins, *outs])
    for r in range(4):
        single = [np.empty((1, o.shape[1]), F) for o in outs]
        one.execute([*[x[r : r + 1].copy() for x in ins], *single])
        for o, s in zip(outs, single):
            np.testing.assert_array_equal(s[0], o[r])
