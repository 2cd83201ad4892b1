"""etbuild.kernels.numerics.window and im2col: extents, window and tap views, padded buffers, columns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.errors import KernelError
from etbuild.kernels.numerics import im2col, window

RNG = np.random.default_rng(0)
GEOMETRIES = [((3, 3), (1, 1), (1, 1)), ((2, 3), (2, 1), (1, 2)), ((1, 1), (2, 2), (1, 1)), ((3, 2), (3, 2), (2, 1))]


@pytest.mark.parametrize(("kernel", "stride", "dilation"), GEOMETRIES)
def test_out_extent_matches_torch_convolution(kernel: tuple, stride: tuple, dilation: tuple) -> None:
    x = torch.zeros(1, 1, 9, 10)
    w = torch.zeros(1, 1, *kernel)
    want = torch.nn.functional.conv2d(x, w, stride=stride, dilation=dilation).shape[2:]
    got = [window.out_extent(s, k, st, d) for s, k, st, d in zip((9, 10), kernel, stride, dilation)]
    assert got == list(want)
    assert window.span(3, 2) == 5 and window.out_extent(4, 3, 1, 2) == 0


@pytest.mark.parametrize(("kernel", "stride", "dilation"), GEOMETRIES)
def test_sliding_channels_first_matches_torch_unfold(kernel: tuple, stride: tuple, dilation: tuple) -> None:
    x = RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)
    view = window.sliding(x, 2, kernel, stride, dilation)  # (N, C, OH, OW, KH, KW)
    assert not view.flags.writeable
    want = torch.nn.functional.unfold(torch.from_numpy(x), kernel, dilation=dilation, stride=stride).numpy()
    got = view.transpose(0, 1, 4, 5, 2, 3).reshape(want.shape)  # torch: (N, C·KH·KW, OH·OW)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("kernel", "stride", "dilation"), GEOMETRIES)
def test_sliding_nhwc_and_its_taps_are_the_same_windows(kernel: tuple, stride: tuple, dilation: tuple) -> None:
    x = RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)
    nchw = window.sliding(x, 2, kernel, stride, dilation)
    nhwc = window.sliding(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), 1, kernel, stride, dilation)
    np.testing.assert_array_equal(nhwc, nchw.transpose(0, 2, 3, 4, 5, 1))
    taps = window.taps(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), 1, kernel, stride, dilation)
    assert len(taps) == kernel[0] * kernel[1]
    for k, tap in enumerate(taps):
        np.testing.assert_array_equal(tap, nhwc[:, :, :, k // kernel[1], k % kernel[1], :])


def test_sliding_refuses_a_window_larger_than_the_input() -> None:
    with pytest.raises(KernelError, match=r"window \[5\] \(dilation \[1\]\) exceeds input \[3\]"):
        window.sliding(np.zeros((1, 3)), 1, [5], [1], [1])


def test_padded_buffer_and_interior() -> None:
    x = RNG.standard_normal((2, 4, 5, 3)).astype(np.float32)
    pads = [(1, 2), (0, 3)]
    shape = window.padded_shape(x.shape, 1, pads)
    assert shape == (2, 7, 8, 3)
    buf = np.full(shape, -1.0, np.float32)
    inner = window.interior(buf, 1, pads, x.shape)
    inner[...] = x
    want = np.pad(x, [(0, 0), (1, 2), (0, 3), (0, 0)], constant_values=-1.0)
    np.testing.assert_array_equal(buf, want)


@pytest.mark.parametrize(("kernel", "stride", "dilation"), GEOMETRIES)
@pytest.mark.parametrize("groups", [1, 3])
def test_columns_match_torch_unfold_per_group(kernel: tuple, stride: tuple, dilation: tuple, groups: int) -> None:
    x = RNG.standard_normal((2, 6, 9, 10)).astype(np.float32)
    cols = im2col.columns(x, kernel, stride, dilation, groups)
    want = torch.nn.functional.unfold(torch.from_numpy(x), kernel, dilation=dilation, stride=stride).numpy()
    np.testing.assert_array_equal(cols, want.reshape(2, groups, -1, want.shape[-1]))


def test_row_view_is_the_nhwc_im2col_matrix() -> None:
    x = RNG.standard_normal((2, 6, 7, 3)).astype(np.float32)
    rows = im2col.row_view(x, (2, 3), (1, 2), (2, 1)).reshape(-1, 2 * 3 * 3)
    want = torch.nn.functional.unfold(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()), (2, 3), dilation=(2, 1),
                                      stride=(1, 2)).numpy()  # (N, C·KH·KW, P)
    want = want.reshape(2, 3, 6, -1).transpose(0, 3, 2, 1).reshape(-1, 18)  # rows (N·P, KH·KW·C)
    np.testing.assert_array_equal(rows, want)
