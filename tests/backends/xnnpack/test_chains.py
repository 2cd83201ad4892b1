"""Runs of elementwise nodes bound as one compiled step (backends/xnnpack/runtime/chains.py): bit for bit the
nodes bound one by one, on RMSNorm-, RoPE- and SwiGLU-shaped runs with scalar, whole and repeated-row inputs, and
with the slices, concatenations and reshapes of rotate-half RoPE among them; a rounded (clamped) node, a column
broadcast and a node of another kind break a run."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime import chains
from tests.backends.xnnpack.graphs import GraphBuilder

IN, OUT = g.FLAG_EXTERNAL_INPUT, g.FLAG_EXTERNAL_OUTPUT
pytestmark = pytest.mark.skipif(chains.module() is None, reason="no numba, or a CPU without AVX512F")


def _graph(rng: np.random.Generator) -> tuple[GraphBuilder, list[np.ndarray], list[tuple[int, ...]]]:
    """x [1,1,64], mean [1,1,1], q [1,1,4,16], cos [1,1,1,16], c [8,1] in; a run of every joinable kind, a clamped
    Multiply, a Concatenate2, a column broadcast; five outputs."""
    gb = GraphBuilder()
    x, mean = gb.tensor((1, 1, 64), flags=IN), gb.tensor((1, 1, 1), flags=IN)
    q, cos, col = gb.tensor((1, 1, 4, 16), flags=IN), gb.tensor((1, 1, 1, 16), flags=IN), gb.tensor((8, 1), flags=IN)
    eps = gb.tensor((1,), data=np.array([1e-5], np.float32))
    w = gb.tensor((64,), data=rng.standard_normal(64).astype(np.float32))
    t = [gb.tensor((1, 1, 1)), gb.tensor((1, 1, 1))] + [gb.tensor((1, 1, 64)) for _ in range(8)]
    rope = [gb.tensor((1, 1, 4, 16)) for _ in range(3)]
    outs = [gb.tensor((1, 1, 64), flags=OUT), gb.tensor((1, 1, 4, 16), flags=OUT), gb.tensor((1, 1, 128), flags=OUT),
            gb.tensor((8, 16), flags=OUT), gb.tensor((1, 1, 64), flags=OUT)]
    gb.node("Add", input1_id=mean, input2_id=eps, output_id=t[0], flags=0)
    gb.node("ReciprocalSquareRoot", input_id=t[0], output_id=t[1], flags=0)
    gb.node("Multiply", input1_id=x, input2_id=t[1], output_id=t[2], flags=0)  # a scalar second
    gb.node("Multiply", input1_id=t[2], input2_id=w, output_id=t[3], flags=0)  # a [64] against [1,1,64]
    gb.node("Sigmoid", input_id=t[3], output_id=t[4], flags=0)
    gb.node("Subtract", input1_id=t[1], input2_id=t[4], output_id=t[5], flags=0)  # a scalar first
    gb.node("Square", input_id=t[5], output_id=t[6], flags=0)
    gb.node("Negate", input_id=t[6], output_id=t[7], flags=0)
    gb.node("Div", input1_id=t[7], input2_id=t[3], output_id=t[8], flags=0)
    gb.node("Multiply", input1_id=t[8], input2_id=x, output_id=outs[0], flags=0)
    gb.node("Multiply", input1_id=q, input2_id=cos, output_id=rope[0], flags=0)  # a row repeated over heads
    gb.node("Sin", input_id=rope[0], output_id=rope[1], flags=0)
    gb.node("Cos", input_id=rope[1], output_id=rope[2], flags=0)
    gb.node("Multiply", input1_id=rope[2], input2_id=q, output_id=outs[1], clamp=(-0.5, 0.5), flags=0)  # rounded
    gb.node("Concatenate2", axis=2, input1_id=t[3], input2_id=t[4], output_id=outs[2], flags=0)
    gb.node("Add", input1_id=col, input2_id=cos, output_id=outs[3], flags=0)  # [8,1] + [1,1,1,16]: a column
    gb.node("Add", input1_id=t[3], input2_id=t[6], output_id=outs[4], flags=0)
    inputs = [rng.standard_normal((1, 1, 64)).astype(np.float32), np.abs(rng.standard_normal((1, 1, 1))).astype(
        np.float32), rng.standard_normal((1, 1, 4, 16)).astype(np.float32),
        rng.standard_normal((1, 1, 1, 16)).astype(np.float32), rng.standard_normal((8, 1)).astype(np.float32)]
    return gb, inputs, [(1, 1, 64), (1, 1, 4, 16), (1, 1, 128), (8, 16), (1, 1, 64)]


def _run(gb: GraphBuilder, inputs: list[np.ndarray], shapes: list[tuple[int, ...]]) -> tuple[list[np.ndarray], list]:
    handle = gb.handle()
    outs = [np.full(s, np.nan, np.float32) for s in shapes]
    for _ in range(2):  # the second call runs the bound steps again
        handle.execute([*inputs, *outs])
    return outs, list(handle.step_names)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_joined_runs_give_the_bits_of_the_nodes_one_by_one(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    gb, inputs, shapes = _graph(np.random.default_rng(seed))
    joined, names = _run(gb, inputs, shapes)
    monkeypatch.setattr(chains, "module", lambda: None)
    alone, alone_names = _run(gb, inputs, shapes)
    for a, b in zip(joined, alone):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert not any("Elementwise" in n for n in alone_names)
    # nodes 0-12 through every kind, broken by the clamped Multiply; the Concatenate2, the column broadcast and
    # the run of one Add after it keep their own steps
    assert names == ["node 0-12 (Elementwise)", "node 13 (Multiply)", "node 14 (Concatenate2)", "node 15 (Add)",
                     "node 16 (Add)"]
    assert len(alone_names) == 17


def test_a_run_matches_numpy_on_its_own_forms() -> None:
    """The joined run against numpy (rsqrt, sigmoid, sin and cos are XNNPACK's forms: compared loosely)."""
    rng = np.random.default_rng(5)
    gb, inputs, shapes = _graph(rng)
    outs, _ = _run(gb, inputs, shapes)
    x, mean, q, cos, col = inputs
    w = np.frombuffer(gb.named[list(gb.named)[1]], np.float32)
    r = 1 / np.sqrt(mean + np.float32(1e-5))
    t3 = x * r * w
    t4 = 1 / (1 + np.exp(-t3))
    t6 = np.square(r - t4)
    np.testing.assert_allclose(outs[0], -t6 / t3 * x, rtol=1e-5)
    np.testing.assert_allclose(outs[1], np.clip(np.cos(np.sin(q * cos)) * q, -0.5, 0.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(outs[3], (col + cos.reshape(1, 16)).reshape(8, 16))
    np.testing.assert_allclose(outs[4], t3 + t6, rtol=1e-5)


def _rms_convert_fc(rng: np.random.Generator, rows: int, n: int = 48, k: int = 64) -> GraphBuilder:
    """x * w → Convert to qdint8 → FullyConnected through a qbint4 filter (a decode step's norm and product)."""
    codes = rng.integers(-8, 8, size=(n, k))
    packed = ((codes[:, 0::2] + 8) | ((codes[:, 1::2] + 8) << 4)).astype(np.uint8)
    bf16 = ((rng.random((n, k // 32)).astype(np.float32) * 0.05 + 0.01).view(np.uint32) >> 16).astype(np.uint16)
    gb = GraphBuilder()
    x, scaled = gb.tensor((rows, k), flags=IN), gb.tensor((rows, k))
    weight = gb.tensor((k,), data=rng.standard_normal(k).astype(np.float32))
    q = gb.tensor((rows, k), g.XNNDatatype.QDINT8, quant=g.PerTokenDynamicQuant(1))
    w = gb.tensor((n, k), g.XNNDatatype.QBINT4, data=packed,
                  quant=g.PerChannelGroupQuant([], 0, 32, gb.constant(bf16), n * k // 32))
    out = gb.tensor((rows, n), flags=OUT)
    gb.node("Multiply", input1_id=x, input2_id=weight, output_id=scaled, flags=0)
    gb.node("Convert", input_id=scaled, output_id=q)
    gb.node("FullyConnected", input1_id=q, filter_id=w, bias_id=g.NO_ID, output_id=out)
    return gb


@pytest.mark.parametrize("rows", [1, 3])
def test_a_convert_keeping_row_codes_joins_the_run(rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """One row: the Multiply and the Convert that keeps the row's codes for the product are one step, the
    product's bits unchanged, call after call on new inputs; several rows (no codes kept): the Multiply and the
    Convert keep their own steps."""
    rng = np.random.default_rng(rows)
    data = [rng.standard_normal((rows, 64)).astype(np.float32) for _ in range(3)]
    results, names = [], []
    for joined in (True, False):
        if not joined:
            monkeypatch.setattr(chains, "module", lambda: None)
        handle = _rms_convert_fc(np.random.default_rng(7), rows).handle()
        outs = []
        for x in data:
            y = np.full((rows, 48), np.nan, np.float32)
            handle.execute([x, y])
            outs.append(y)
        results.append(outs)
        names.append(list(handle.step_names))
    for a, b in zip(*results):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    if rows == 1:
        assert names[0] == ["node 0-1 (Elementwise)", "node 2 (FullyConnected)"]
    else:
        assert names[0] == names[1] == ["node 0 (Multiply)", "node 1 (Convert)", "node 2 (FullyConnected)"]


def _rotate_half(gb: GraphBuilder, q: int, cos: int, sin: int, heads: int, d: int) -> list[int]:
    """x·cos + cat(−x[..., d/2:], x[..., :d/2])·sin as an exported RoPE lowers (Multiply, two StaticSlices, Negate,
    Concatenate2, Multiply, Add), the result reshaped to [1, heads·d]; and heads 1-2 sliced off the middle axis."""
    half = d // 2
    t = [gb.tensor((1, 1, heads, half)) for _ in range(3)] + [gb.tensor((1, 1, heads, d)) for _ in range(4)]
    out, mid = gb.tensor((1, heads * d), flags=OUT), gb.tensor((1, 1, 2, d), flags=OUT)
    gb.node("Multiply", input1_id=q, input2_id=cos, output_id=t[3], flags=0)
    gb.node("StaticSlice", num_dims=4, offsets=[0, 0, 0, 0], sizes=[1, 1, heads, half], input_id=q, output_id=t[0],
            flags=0)
    gb.node("StaticSlice", num_dims=4, offsets=[0, 0, 0, half], sizes=[1, 1, heads, half], input_id=q,
            output_id=t[1], flags=0)
    gb.node("Negate", input_id=t[1], output_id=t[2], flags=0)
    gb.node("Concatenate2", axis=3, input1_id=t[2], input2_id=t[0], output_id=t[4], flags=0)
    gb.node("Multiply", input1_id=t[4], input2_id=sin, output_id=t[5], flags=0)
    gb.node("Add", input1_id=t[3], input2_id=t[5], output_id=t[6], flags=0)
    gb.node("StaticReshape", num_dims=2, new_shape=[1, heads * d], input_id=t[6], output_id=out)
    gb.node("StaticSlice", num_dims=4, offsets=[0, 0, 1, 0], sizes=[1, 1, 2, d], input_id=t[6], output_id=mid,
            flags=0)
    return [out, mid]


def test_rotate_half_rope_with_its_slices_and_concatenation_is_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    heads, d = 4, 16
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((1, 1, heads, d), (1, 1, 1, d), (1, 1, 1, d))]
    results, names = [], []
    for joined in (True, False):
        if not joined:
            monkeypatch.setattr(chains, "module", lambda: None)
        gb = GraphBuilder()
        q, cos, sin = (gb.tensor(x.shape, flags=IN) for x in inputs)
        _rotate_half(gb, q, cos, sin, heads, d)
        outs, step_names = _run(gb, inputs, [(1, heads * d), (1, 1, 2, d)])
        results.append(outs)
        names.append(step_names)
    assert names[0] == ["node 0-8 (Elementwise)"] and len(names[1]) == 9
    for a, b in zip(*results):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    q, cos, sin = inputs
    rotated = np.concatenate([-q[..., d // 2:], q[..., : d // 2]], axis=-1)
    expected = q * cos + rotated * sin
    np.testing.assert_array_equal(results[0][0], expected.reshape(1, heads * d))
    np.testing.assert_array_equal(results[0][1], expected[:, :, 1:3])
