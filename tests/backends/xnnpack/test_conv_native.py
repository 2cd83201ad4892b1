"""DepthwiseConv2d and Conv2d through our XNNPACK backend, with the compiled loops (numba) and without them,
against torch's conv2d (groups = channels for the depthwise ones), the fused output clamp included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from etbuild.backends.xnnpack.format.graph import NO_ID
from etbuild.backends.xnnpack.runtime.ops.conv import _column_blocks
from etbuild.kernels import native
from etbuild.runtime import threads
from tests.backends.xnnpack.graphs import GraphBuilder

torch = pytest.importorskip("torch")

CASES = [  # (N, H, W, C, multiplier, kernel, stride, dilation, padding (top, right, bottom, left), clamp)
    (1, 48, 48, 16, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (0.0, 6.0)),  # MobileNet's ReLU6 blocks
    (1, 24, 24, 48, 1, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0), (0.0, 6.0)),  # stride 2, one-sided padding
    (1, 6, 6, 192, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), None),
    (2, 7, 5, 3, 2, (3, 2), (2, 1), (1, 2), (2, 0, 1, 1), (-0.5, math.inf)),  # odd shapes, a depth multiplier
    (1, 9, 11, 70, 1, (5, 5), (3, 2), (2, 1), (2, 2, 2, 2), (-math.inf, 1.0)),  # dilation, strides 3 and 2
    (1, 13, 8, 1, 1, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), None),  # one channel
    (1, 13, 8, 1, 3, (2, 4), (2, 2), (1, 1), (0, 3, 1, 2), (-1.0, 1.0)),  # one input channel, three outputs
    (1, 5, 5, 5, 1, (5, 5), (1, 1), (1, 1), (0, 0, 0, 0), None),  # one output pixel
    (1, 3, 3, 4, 1, (3, 3), (1, 1), (1, 1), (4, 4, 4, 4), None),  # padding wider than the input
]


def torch_depthwise(x: np.ndarray, w: np.ndarray, b: np.ndarray, case: tuple) -> np.ndarray:
    """torch's conv2d (NCHW, groups = input channels) of the NHWC input, padded as XNNPACK's node says."""
    _, _, _, c, _, _, stride, dil, (top, right, bottom, left), clamp = case
    xt = torch.nn.functional.pad(torch.from_numpy(x).permute(0, 3, 1, 2), (left, right, top, bottom))
    wt = torch.from_numpy(np.ascontiguousarray(w.transpose(2, 0, 1)))[:, None]  # [C·M, 1, KH, KW]
    y = torch.nn.functional.conv2d(xt, wt, torch.from_numpy(b), stride=stride, dilation=dil, groups=c)
    if clamp is not None:
        y = y.clamp(*clamp)
    return y.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("native_loops", ["1", "0"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-s{c[6][0]}{c[6][1]}")
def test_depthwise_matches_torch(case: tuple, native_loops: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=native_loops != "0"))
    if native_loops == "1" and native.loops() is None:
        pytest.skip("numba is not installed")
    n, h, w_, c, mult, (kh, kw), stride, dil, pad, clamp = case
    rng = np.random.default_rng(sum(case[:5]))
    x = rng.standard_normal((n, h, w_, c)).astype(np.float32)
    w = rng.standard_normal((kh, kw, c * mult)).astype(np.float32)
    b = rng.standard_normal(c * mult).astype(np.float32)
    want = torch_depthwise(x, w, b, case)
    gb = GraphBuilder()
    xi = gb.tensor((n, h, w_, c), flags=1)
    wi, bi = gb.tensor((1, kh, kw, c * mult), data=w[None]), gb.tensor((c * mult,), data=b)
    oi = gb.tensor(want.shape, flags=2)
    gb.node("DepthwiseConv2d", clamp=clamp, padding_top=pad[0], padding_right=pad[1], padding_bottom=pad[2],
            padding_left=pad[3], kernel_height=kh, kernel_width=kw, subsampling_height=stride[0],
            subsampling_width=stride[1], dilation_height=dil[0], dilation_width=dil[1], group_input_channels=1,
            group_output_channels=mult, groups=c, input1_id=xi, filter_id=wi, bias_id=bi, output_id=oi)
    handle = gb.handle()
    out = np.full(want.shape, np.nan, np.float32)
    for _ in range(2):  # the second call reuses the binding
        handle.execute([x, out])
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    x *= -1  # bound to the same arrays, the next call reads the new input
    handle.execute([x, out])
    want = torch_depthwise(x, w, b, case)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))


CONV_CASES = [  # (N, H, W, Cin, Cout, groups, kernel, stride, padding (top, right, bottom, left), bias, clamp)
    (1, 24, 24, 16, 96, 1, (1, 1), (1, 1), (0, 0, 0, 0), True, (0.0, 6.0)),  # 1×1, ReLU6
    (1, 12, 12, 96, 24, 1, (1, 1), (1, 1), (0, 0, 0, 0), True, None),  # 1×1 projection
    (1, 5, 7, 8, 4, 1, (1, 1), (1, 1), (0, 0, 0, 0), False, (-1.0, math.inf)),  # no bias, a lower bound only
    (1, 17, 15, 3, 16, 1, (3, 3), (2, 2), (0, 1, 1, 0), True, (0.0, 6.0)),  # the stem: im2col
    (2, 6, 6, 8, 6, 2, (3, 3), (1, 1), (1, 1, 1, 1), True, (-0.5, 0.5)),  # grouped
    (1, 3, 3, 160, 1280, 1, (1, 1), (1, 1), (0, 0, 0, 0), True, (0.0, 6.0)),  # few rows: in column blocks
    (1, 2, 3, 96, 1000, 1, (1, 1), (1, 1), (0, 0, 0, 0), False, None),
    (1, 1, 1, 960, 1280, 1, (1, 1), (1, 1), (0, 0, 0, 0), True, (0.0, 6.0)),  # one pixel: the filter in tiles
    (1, 1, 1, 70, 300, 1, (1, 1), (1, 1), (0, 0, 0, 0), False, None),  # one pixel, a part tile, no bias
]


@pytest.mark.parametrize("native_loops", ["1", "0"])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c[:6])))
def test_conv2d_bias_and_clamp_match_torch(case: tuple, native_loops: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=native_loops != "0"))
    if native_loops == "1" and native.loops() is None:
        pytest.skip("numba is not installed")
    n, h, w_, cin, cout, groups, (kh, kw), stride, (top, right, bottom, left), has_bias, clamp = case
    rng = np.random.default_rng(sum(case[:6]))
    x = rng.standard_normal((n, h, w_, cin)).astype(np.float32)
    w = rng.standard_normal((cout, kh, kw, cin // groups)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    xt = torch.nn.functional.pad(torch.from_numpy(x).permute(0, 3, 1, 2), (left, right, top, bottom))
    y = torch.nn.functional.conv2d(xt, torch.from_numpy(w).permute(0, 3, 1, 2), torch.from_numpy(b) if has_bias
                                   else None, stride=stride, groups=groups)
    want = (y.clamp(*clamp) if clamp else y).permute(0, 2, 3, 1).numpy()
    gb = GraphBuilder()
    xi, wi = gb.tensor((n, h, w_, cin), flags=1), gb.tensor(w.shape, data=w)
    bi = gb.tensor((cout,), data=b) if has_bias else NO_ID
    oi = gb.tensor(want.shape, flags=2)
    gb.node("Conv2d", clamp=clamp, padding_top=top, padding_right=right, padding_bottom=bottom, padding_left=left,
            kernel_height=kh, kernel_width=kw, subsampling_height=stride[0], subsampling_width=stride[1],
            dilation_height=1, dilation_width=1, groups=groups, group_input_channels=cin // groups,
            group_output_channels=cout // groups, input1_id=xi, filter_id=wi, bias_id=bi, output_id=oi)
    out = np.full(want.shape, np.nan, np.float32)
    handle = gb.handle()
    handle.execute([x, out])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    (conv,) = handle.graph.ops
    one_pixel = native_loops == "1" and h * w_ == 1 and cout >= 256
    assert (conv.tiles is not None) == one_pixel  # one pixel with the loops on: XNNPACK's FMA order on tiles


def test_few_rows_and_many_columns_are_multiplied_in_column_blocks() -> None:
    assert _column_blocks(9, 160, 1280) == 8  # 9·160·160 multiply-adds a block
    assert _column_blocks(2304, 27, 16) == 1 and _column_blocks(9, 16, 16) == 1
