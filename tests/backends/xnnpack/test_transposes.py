"""Transposes folded at compile time (ops/transposes.py): a transpose of a transpose as one, a batched product
written straight into its transpose's layout. Against numpy and bit for bit against the unfolded graph."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime.ops import transposes
from etbuild.backends.xnnpack.runtime.ops.layout import StaticTranspose
from etbuild.backends.xnnpack.runtime.ops.transposes import Transpose, TransposedProduct
from tests.backends.xnnpack.graphs import GraphBuilder

IN, OUT = g.FLAG_EXTERNAL_INPUT, g.FLAG_EXTERNAL_OUTPUT
TRANSPOSE_B = 1  # XNN_FLAG_TRANSPOSE_WEIGHTS on a BatchMatrixMultiply


def attention_output(heads: int, t: int, s: int, d: int, transpose_b: bool, extra_reader: bool = False
                     ) -> GraphBuilder:
    """p [H, T, S] @ v [H, S, D] (v as [H, D, S] with transpose_b) → reshape [1, H, T, D] → transpose (0, 2, 1, 3)
    → [1, T, H, D], the output; with extra_reader the product is an output too (no fold)."""
    gb = GraphBuilder()
    p = gb.tensor((heads, t, s), flags=IN)
    v = gb.tensor((heads, d, s) if transpose_b else (heads, s, d), flags=IN)
    mid = gb.tensor((heads, t, d), flags=OUT if extra_reader else 0)
    mid4, out = gb.tensor((1, heads, t, d)), gb.tensor((1, t, heads, d), flags=OUT)
    gb.node("BatchMatrixMultiply", input1_id=p, input2_id=v, output_id=mid, flags=TRANSPOSE_B if transpose_b else 0)
    gb.node("StaticReshape", num_dims=4, new_shape=[1, heads, t, d], input_id=mid, output_id=mid4)
    gb.node("StaticTranspose", num_dims=4, perm=[0, 2, 1, 3], input_id=mid4, output_id=out)
    return gb


def double_transpose(shape: tuple[int, ...], first: list[int], second: list[int]) -> GraphBuilder:
    gb = GraphBuilder()
    x = gb.tensor(shape, flags=IN)
    mid_shape = tuple(shape[p] for p in first)
    mid, out = gb.tensor(mid_shape), gb.tensor(tuple(mid_shape[p] for p in second), flags=OUT)
    gb.node("StaticTranspose", num_dims=len(shape), perm=first, input_id=x, output_id=mid)
    gb.node("StaticTranspose", num_dims=len(shape), perm=second, input_id=mid, output_id=out)
    return gb


def run(gb: GraphBuilder, ins: list[np.ndarray], shapes: list[tuple[int, ...]]) -> tuple[list[np.ndarray], list]:
    handle = gb.handle()
    outs = [np.full(s, np.nan, np.float32) for s in shapes]
    handle.execute([*ins, *outs])
    return outs, handle.graph.ops


@pytest.mark.parametrize(("heads", "t", "s", "d", "transpose_b"),
                         [(4, 128, 128, 64, False), (3, 17, 17, 64, False), (2, 5, 7, 3, True), (4, 64, 64, 32, True)])
def test_a_product_writes_into_its_transpose_s_layout(heads: int, t: int, s: int, d: int, transpose_b: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(heads * t + d)
    p = rng.standard_normal((heads, t, s)).astype(np.float32)
    v = rng.standard_normal((heads, d, s) if transpose_b else (heads, s, d)).astype(np.float32)
    (out,), ops = run(attention_output(heads, t, s, d, transpose_b), [p, v], [(1, t, heads, d)])
    assert [type(op) for op in ops] == [TransposedProduct]
    vv = np.swapaxes(v, -1, -2) if transpose_b else v
    want = (p.astype(np.float64) @ vv.astype(np.float64)).transpose(1, 0, 2)[None]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    monkeypatch.setattr(transposes, "fold", lambda ops, snaps, values: (ops, snaps))
    (unfolded,), ops = run(attention_output(heads, t, s, d, transpose_b), [p, v], [(1, t, heads, d)])
    assert not any(isinstance(op, TransposedProduct) for op in ops)
    assert unfolded.tobytes() == out.tobytes()


def test_a_product_read_elsewhere_is_not_folded() -> None:
    rng = np.random.default_rng(1)
    p, v = rng.standard_normal((2, 6, 5)).astype(np.float32), rng.standard_normal((2, 5, 4)).astype(np.float32)
    (mid, out), ops = run(attention_output(2, 6, 5, 4, False, extra_reader=True), [p, v], [(2, 6, 4), (1, 6, 2, 4)])
    assert not any(isinstance(op, TransposedProduct) for op in ops)
    np.testing.assert_array_equal(out[0], mid.transpose(1, 0, 2))


@pytest.mark.parametrize(("shape", "first", "second"),
                         [((1, 128, 4, 64), [0, 2, 1, 3], [0, 1, 3, 2]), ((1, 3, 17, 64), [2, 0, 1, 3], [1, 2, 0, 3]),
                          ((2, 3, 4), [2, 0, 1], [1, 2, 0])])
def test_two_transposes_are_one(shape: tuple[int, ...], first: list[int], second: list[int]) -> None:
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    want = x.transpose(first).transpose(second)
    (out,), ops = run(double_transpose(shape, first, second), [x], [want.shape])
    assert len(ops) == 1 and isinstance(ops[0], Transpose) and isinstance(ops[0], StaticTranspose)
    np.testing.assert_array_equal(out, want)
