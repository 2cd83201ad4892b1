"""A FullyConnected fused with the Gelu or residual Add that alone reads it (ops/epilogue.py): against torch, bit
for bit against the two nodes' own steps, and left unfused where another node reads the product."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.graph import NO_ID
from etbuild.backends.xnnpack.runtime import compile as compile_module
from etbuild.kernels import native
from tests.backends.xnnpack.graphs import GraphBuilder

torch = pytest.importorskip("torch")
IN, OUT = g.FLAG_EXTERNAL_INPUT, g.FLAG_EXTERNAL_OUTPUT


def graph(follower: str, rows: int, k: int, n: int, bias: bool, seed: int = 0) -> tuple[GraphBuilder, dict]:
    """x [rows, k] → FullyConnected → Gelu, or → Add with r [rows, n] (the product first or second)."""
    rng = np.random.default_rng(seed)
    data = {"x": rng.standard_normal((rows, k)).astype(np.float32),
            "w": rng.standard_normal((n, k)).astype(np.float32) / np.float32(k ** 0.5),
            "b": rng.standard_normal(n).astype(np.float32) if bias else None,
            "r": rng.standard_normal((rows, n)).astype(np.float32)}
    gb = GraphBuilder()
    x = gb.tensor((rows, k), flags=IN)
    r = gb.tensor((rows, n), flags=IN) if follower != "Gelu" else None
    wid = gb.tensor((n, k), data=data["w"])
    bid = gb.tensor((n,), data=data["b"]) if bias else NO_ID
    mid, out = gb.tensor((rows, n)), gb.tensor((rows, n), flags=OUT)
    gb.node("FullyConnected", input1_id=x, filter_id=wid, bias_id=bid, output_id=mid, flags=0)
    if follower == "Gelu":
        gb.node("Gelu", input_id=mid, output_id=out, flags=0)
    else:
        a, b = (mid, r) if follower == "Add" else (r, mid)
        gb.node("Add", input1_id=a, input2_id=b, output_id=out, flags=0)
    return gb, data


def torch_result(follower: str, data: dict) -> np.ndarray:
    b = torch.from_numpy(data["b"]) if data["b"] is not None else None
    y = torch.nn.functional.linear(torch.from_numpy(data["x"]), torch.from_numpy(data["w"]), b)
    y = torch.nn.functional.gelu(y) if follower == "Gelu" else y + torch.from_numpy(data["r"])
    return y.numpy()


def run(gb: GraphBuilder, follower: str, data: dict) -> tuple[np.ndarray, list[str]]:
    handle = gb.handle()
    out = np.full(data["r"].shape, np.nan, np.float32)
    args = [data["x"], out] if follower == "Gelu" else [data["x"], data["r"], out]
    handle.execute(args)
    return out, list(handle.step_names)


CASES = [("Gelu", 128, 64, 96, True), ("Gelu", 5, 7, 3, False), ("Add", 16, 32, 24, True),
         ("AddSecond", 9, 8, 40, True), ("Add", 3, 5, 6, False), ("Gelu", 1, 16, 8, True)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_fused_matches_torch_and_the_unfused_steps(case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    if native.loops() is None:
        pytest.skip("numba is not installed")
    follower, rows, k, n, bias = case
    gb, data = graph(follower, rows, k, n, bias, seed=rows + k)
    fused, names = run(gb, follower, data)
    assert any(" + " in name for name in names), names  # one step for both nodes
    np.testing.assert_allclose(fused, torch_result(follower, data), rtol=2e-5, atol=2e-5)
    monkeypatch.setattr(compile_module, "_fuse_epilogues", lambda ops, snaps, values: (ops, snaps))
    unfused, names = run(gb, follower, data)
    assert not any(" + " in name for name in names)
    assert np.array_equal(fused, unfused)


def test_not_fused_when_another_node_reads_the_product() -> None:
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((6, 8)).astype(np.float32)
    gb = GraphBuilder()
    xi = gb.tensor((4, 8), flags=IN)
    wid = gb.tensor((6, 8), data=w)
    mid, o1, o2 = gb.tensor((4, 6)), gb.tensor((4, 6), flags=OUT), gb.tensor((4, 6), flags=OUT)
    gb.node("FullyConnected", input1_id=xi, filter_id=wid, bias_id=NO_ID, output_id=mid, flags=0)
    gb.node("Gelu", input_id=mid, output_id=o1, flags=0)
    gb.node("Add", input1_id=mid, input2_id=o1, output_id=o2, flags=0)
    handle = gb.handle()
    out1, out2 = np.empty((4, 6), np.float32), np.empty((4, 6), np.float32)
    handle.execute([x, out1, out2])
    assert not any(" + " in name for name in handle.step_names)
    y = torch.from_numpy(x) @ torch.from_numpy(w).T
    np.testing.assert_allclose(out2, (y + torch.nn.functional.gelu(y)).numpy(), rtol=2e-5, atol=2e-5)
