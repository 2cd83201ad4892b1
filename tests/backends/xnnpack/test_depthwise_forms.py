"""DepthwiseConv2d's bindings (phase grids, direct window view, the compiled loop) against a float64 reference on
odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.runtime import loops as compiled_loops
from etbuild.backends.xnnpack.runtime.ops.conv import DIRECT_CHANNELS, DepthwiseConv2d
from etbuild.runtime import threads
from tests.backends.xnnpack.graphs import GraphBuilder

RNG = np.random.default_rng(0)
CASES = [  # (N, H, W, C, multiplier, kernel, stride, dilation, padding (top, right, bottom, left))
    (1, 6, 6, 192, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # MobileNet's small grids
    (1, 24, 24, 96, 1, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),  # stride 2, padding on one side as ExecuTorch's
    (2, 7, 5, 3, 2, (3, 2), (2, 1), (1, 2), (2, 0, 1, 1)),  # odd everything, a depth multiplier
    (1, 9, 11, 70, 1, (5, 5), (3, 2), (1, 1), (2, 2, 2, 2)),
    (1, 5, 5, 8, 1, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
]


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, mult: int, stride: tuple[int, int],
              dil: tuple[int, int], pad: tuple[int, int, int, int]) -> np.ndarray:
    top, right, bottom, left = pad
    xp = np.pad(np.repeat(x.astype(np.float64), mult, axis=3), ((0, 0), (top, bottom), (left, right), (0, 0)))
    kh, kw = w.shape[:2]
    oh = (xp.shape[1] - (kh - 1) * dil[0] - 1) // stride[0] + 1
    ow = (xp.shape[2] - (kw - 1) * dil[1] - 1) // stride[1] + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[2])) + b
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dil[0], j * dil[1]
            rows, cols = slice(y0, y0 + stride[0] * (oh - 1) + 1, stride[0]), slice(x0, x0 + stride[1] * (ow - 1) + 1,
                                                                                     stride[1])
            out += xp[:, rows, cols] * w[i, j]
    return out


def depthwise(case: tuple) -> tuple[DepthwiseConv2d, np.ndarray, np.ndarray]:
    n, h, w_, c, mult, (kh, kw), stride, dil, pad = case
    x = RNG.standard_normal((n, h, w_, c)).astype(np.float32)
    w = RNG.standard_normal((kh, kw, c * mult)).astype(np.float32)
    b = RNG.standard_normal(c * mult).astype(np.float32)
    want = reference(x, w, b, mult, stride, dil, pad)
    gb = GraphBuilder()
    xi = gb.tensor((n, h, w_, c), flags=1)
    wi, bi = gb.tensor((1, kh, kw, c * mult), data=w[None]), gb.tensor((c * mult,), data=b)
    oi = gb.tensor(want.shape, flags=2)
    gb.node("DepthwiseConv2d", padding_top=pad[0], padding_right=pad[1], padding_bottom=pad[2], padding_left=pad[3],
            kernel_height=kh, kernel_width=kw, subsampling_height=stride[0], subsampling_width=stride[1],
            dilation_height=dil[0], dilation_width=dil[1], group_input_channels=1, group_output_channels=mult,
            groups=c, input1_id=xi, filter_id=wi, bias_id=bi, output_id=oi)
    op = gb.handle().graph.ops[0]
    return op, x, want


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-s{c[6][0]}{c[6][1]}")
def test_both_forms_compute_the_depthwise_convolution(case: tuple) -> None:
    op, x, want = depthwise(case)
    loops = compiled_loops.compiled()
    for form in ("direct", "phased", "bind") + (("fused",) if loops is not None else ()):
        out = np.empty(want.shape, np.float32)
        if form == "fused":
            step = op.fused(x, out, loops)
        else:
            step = op.bind([x], [out]) if form == "bind" else getattr(op, form)(x, out)
        step()
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        x_before = x.copy()
        x *= -1  # bound to x: the next call reads its new contents
        step()
        np.testing.assert_allclose(out, -want + 2 * op.bias.astype(np.float64), rtol=1e-5, atol=1e-4)
        x[...] = x_before


def test_many_channels_on_small_or_strided_grids_bind_the_direct_form(monkeypatch: pytest.MonkeyPatch) -> None:
    # the numpy forms (with numba, bind takes the compiled loop)
    monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=False))
    op, x, want = depthwise(CASES[0])
    assert op.cout >= DIRECT_CHANNELS
    out = np.empty(want.shape, np.float32)
    assert op.bind([x], [out]).__qualname__.startswith("DepthwiseConv2d.direct")
    op, x, want = depthwise(CASES[2])
    assert op.bind([x], [np.empty(want.shape, np.float32)]).__qualname__.startswith("DepthwiseConv2d.phased")
