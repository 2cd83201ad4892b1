"""Softmax through numba's row loop (compiled.softmax_rows), alone and fused with the Multiply by a scalar before
it (ops/softmax.py ScaledSoftmax), against torch in float64: ordinary rows, a row far below the others, rows with
nan, ±inf, negative and zero scales, the scale on either side; and the numpy path with the loops off."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime import compile as compile_module
from etbuild.backends.xnnpack.runtime import loops as compiled_loops
from etbuild.kernels import native
from etbuild.runtime import threads
from tests.backends.xnnpack.graphs import GraphBuilder

torch = pytest.importorskip("torch")
IN, OUT = g.FLAG_EXTERNAL_INPUT, g.FLAG_EXTERNAL_OUTPUT
SHAPE = (2, 3, 17, 40)


def scores(special: str | None, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32) * 6
    x[0, 1, 4] -= 300  # a row whose largest entry is far below the largest of all
    if special is not None:
        x[1, 2, 7, 5] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[special]
        x[1, 0, 3, :] = -np.inf if special == "-inf" else x[1, 0, 3, :]  # a row of -inf only: nan
    return x


def expected(x: np.ndarray, scale: float) -> np.ndarray:
    t = torch.from_numpy(x) * torch.tensor(scale, dtype=torch.float32)  # float32 product, as the Multiply node
    return torch.softmax(t.double(), -1).numpy()


def check(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-12)


def run_scaled(x: np.ndarray, scale: float, scale_first: bool) -> tuple[np.ndarray, list[str]]:
    gb = GraphBuilder()
    xi, si = gb.tensor(SHAPE, flags=IN), gb.tensor((1,), flags=IN)
    mid, out = gb.tensor(SHAPE), gb.tensor(SHAPE, flags=OUT)
    a, b = (si, xi) if scale_first else (xi, si)
    gb.node("Multiply", input1_id=a, input2_id=b, output_id=mid, flags=0)
    gb.node("Softmax", input_id=mid, output_id=out, flags=0)
    handle = gb.handle()
    o = np.full(SHAPE, -1.0, np.float32)
    handle.execute([x, np.array([scale], np.float32), o])
    return o, list(handle.step_names)


@pytest.mark.parametrize("native_loops", ["1", "0"])
@pytest.mark.parametrize("special", [None, "nan", "inf", "-inf"])
@pytest.mark.parametrize(("scale", "scale_first"), [(0.125, False), (-0.7, True), (0.0, False)])
def test_scaled_softmax_matches_torch(native_loops: str, special: str | None, scale: float, scale_first: bool,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=native_loops != "0"))
    if native_loops == "1" and native.loops() is None:
        pytest.skip("numba is not installed")
    x = scores(special)
    with np.errstate(invalid="ignore"):
        want = expected(x, scale)
    got, names = run_scaled(x, scale, scale_first)
    check(got, want)
    assert any(" + " in n for n in names) == (native_loops == "1")
    if native_loops == "1":  # the same bits as the Multiply and the Softmax bound one by one
        monkeypatch.setattr(compile_module, "FUSERS", ())
        unfused, names = run_scaled(x, scale, scale_first)
        assert not any(" + " in n for n in names)
        np.testing.assert_array_equal(got, unfused)


@pytest.mark.parametrize("native_loops", ["1", "0"])
def test_softmax_alone_matches_torch(native_loops: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=native_loops != "0"))
    if native_loops == "1" and native.loops() is None:
        pytest.skip("numba is not installed")
    gb = GraphBuilder()
    xi, out = gb.tensor(SHAPE, flags=IN), gb.tensor(SHAPE, flags=OUT)
    gb.node("Softmax", input_id=xi, output_id=out, flags=0)
    handle = gb.handle()
    x, o = scores(None, seed=1) * 10, np.empty(SHAPE, np.float32)
    for _ in range(2):
        handle.execute([x, o])
        check(o, expected(x, 1.0))
        x = -x  # the next call reads the new numbers through the same binding


def test_exp_is_within_one_ulp() -> None:
    loops = compiled_loops.compiled()
    if loops is None:
        pytest.skip("numba is not installed")
    import numba

    @numba.njit
    def exps(t: np.ndarray, out: np.ndarray) -> None:
        for j in range(t.shape[0]):
            out[j] = loops._exp_le0(t[j])

    t = np.concatenate([np.linspace(-87.33, 0, 200_001), -np.geomspace(1e-30, 87.3, 1001), [0.0]]).astype(np.float32)
    out = np.empty_like(t)
    exps(t, out)
    exact = np.exp(t.astype(np.float64))
    assert np.max(np.abs(out - exact) / np.spacing(exact.astype(np.float32))) < 1
    below = np.array([-87.34, -100.0, -np.inf], np.float32)
    exps(below, out[:3])
    assert not out[:3].any()
    exps(np.array([np.nan], np.float32), out[:1])
    assert np.isnan(out[0])
