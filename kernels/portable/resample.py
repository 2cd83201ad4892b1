"""Spatial resampling: upsample_nearest2d, upsample_bilinear2d (size or scale overloads),
grid_sampler_2d (bilinear, nearest, bicubic).

Source coordinates follow torch's CPU kernels: nearest takes floor(dst · in/out) in float32;
bilinear maps pixel centres (or corners with align_corners) and clamps negative sources to 0.
grid_sampler_2d computes in the input's dtype (float16 too), as torch's CPU kernel does.
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import cast, opmath, store
from etbuild.runtime.kernel_registry import FLOAT_DTYPES, kernel

Size2 = tuple[int, int]
Scales2 = tuple[float | None, float | None]


def _output_size(
    x: np.ndarray, output_size: list[int] | None, scale_factors: list[float] | None
) -> tuple[Size2, Scales2]:
    """Output (H, W) and the scales torch uses for indexing, from the vec overloads' args."""
    if x.ndim != 4:
        raise KernelError(f"upsample2d: expected an (N, C, H, W) input, got {list(x.shape)}")
    if output_size is not None:
        return (output_size[0], output_size[1]), (None, None)
    if not scale_factors:
        raise KernelError("upsample2d: give output_size or scale_factors")
    h, w = (int(n * s) for n, s in zip(x.shape[2:], scale_factors))
    return (h, w), (scale_factors[0], scale_factors[1])


def _scale(n_in: int, n_out: int, scale: float | None, align_corners: bool) -> float:
    """Input pixels per output pixel."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _nearest_index(n_in: int, n_out: int, scale: float | None) -> np.ndarray:
    if n_out == n_in:
        return np.arange(n_out)
    if n_out == 2 * n_in:
        return np.arange(n_out) >> 1
    s = np.float32(_scale(n_in, n_out, scale, False))
    return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * s).astype(np.intp), n_in - 1)


def _nearest(x: np.ndarray, size: Size2, scales: Scales2, out: np.ndarray) -> np.ndarray:
    rows = _nearest_index(x.shape[2], size[0], scales[0])
    cols = _nearest_index(x.shape[3], size[1], scales[1])
    return store(out, x[:, :, rows[:, None], cols[None, :]])


def _linear_taps(
    n_in: int, n_out: int, scale: float | None, align_corners: bool, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output position: the two source indices and the weight of the second."""
    s = dtype.type(_scale(n_in, n_out, scale, align_corners))
    dst = np.arange(n_out, dtype=dtype)
    src = s * dst if align_corners else np.maximum(s * (dst + dtype.type(0.5)) - dtype.type(0.5), 0)
    i0 = src.astype(np.intp)
    i1 = i0 + (i0 < n_in - 1)
    return i0, i1, np.clip(src - i0, 0, 1).astype(dtype)


def _bilinear(x: np.ndarray, size: Size2, align_corners: bool, scales: Scales2, out: np.ndarray) -> np.ndarray:
    v = cast(x, opmath(x.dtype))
    h0, h1, wh = _linear_taps(x.shape[2], size[0], scales[0], align_corners, v.dtype)
    w0, w1, ww = _linear_taps(x.shape[3], size[1], scales[1], align_corners, v.dtype)
    rows = v[:, :, h0] * (1 - wh)[:, None] + v[:, :, h1] * wh[:, None]
    return store(out, rows[..., w0] * (1 - ww) + rows[..., w1] * ww)


@kernel("aten::upsample_nearest2d.vec_out", dtypes=FLOAT_DTYPES)
def upsample_nearest2d_vec_out(
    x: np.ndarray, output_size: list[int] | None, scale_factors: list[float] | None, out: np.ndarray
) -> np.ndarray:
    size, scales = _output_size(x, output_size, scale_factors)
    return _nearest(x, size, scales, out)


@kernel("aten::upsample_nearest2d.out", dtypes=FLOAT_DTYPES)
def upsample_nearest2d_out(
    x: np.ndarray, output_size: list[int], scales_h: float | None, scales_w: float | None, out: np.ndarray
) -> np.ndarray:
    return _nearest(x, (output_size[0], output_size[1]), (scales_h, scales_w), out)


@kernel("aten::upsample_bilinear2d.vec_out", dtypes=FLOAT_DTYPES)
def upsample_bilinear2d_vec_out(
    x: np.ndarray,
    output_size: list[int] | None,
    align_corners: bool,
    scale_factors: list[float] | None,
    out: np.ndarray,
) -> np.ndarray:
    size, scales = _output_size(x, output_size, scale_factors)
    return _bilinear(x, size, align_corners, scales, out)


@kernel("aten::upsample_bilinear2d.out", dtypes=FLOAT_DTYPES)
def upsample_bilinear2d_out(
    x: np.ndarray,
    output_size: list[int],
    align_corners: bool,
    scales_h: float | None,
    scales_w: float | None,
    out: np.ndarray,
) -> np.ndarray:
    return _bilinear(x, (output_size[0], output_size[1]), align_corners, (scales_h, scales_w), out)


def _reflect(coord: np.ndarray, twice_low: int, twice_high: int) -> np.ndarray:
    """Fold coordinates into [low, high] by reflecting at the bounds (grid_sample's rule)."""
    if twice_low == twice_high:
        return np.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    dist = np.abs(coord - low)
    extra = np.fmod(dist, span)
    flips = np.floor(dist / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low)


def _unnormalize(coord: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Grid coordinate in [-1, 1] to input pixel space."""
    one = coord.dtype.type(1)
    return (coord + one) / 2 * (size - 1) if align_corners else ((coord + one) * size - one) / 2


def _pad_coord(pix: np.ndarray, size: int, padding_mode: int, align_corners: bool) -> np.ndarray:
    """Border padding clamps into the input, reflection folds then clamps, zeros keeps."""
    if padding_mode == 2:
        pix = _reflect(pix, 0, 2 * (size - 1)) if align_corners else _reflect(pix, -1, 2 * size - 1)
    return np.clip(pix, 0, size - 1) if padding_mode in (1, 2) else pix


def _tap(x: np.ndarray, iy: np.ndarray, ix: np.ndarray) -> np.ndarray:
    """x[n, :, iy, ix] as (N, C, Ho, Wo), zero where (iy, ix) falls outside the input."""
    h, w = x.shape[2:]
    valid = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    n = np.arange(x.shape[0])[:, None, None]
    values = x[n, :, np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)]  # (N, Ho, Wo, C)
    return np.moveaxis(np.where(valid[..., None], values, 0), -1, 1)


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Weights of the taps at -1, 0, 1, 2 for fraction t (cubic convolution, A = -0.75)."""
    a = -0.75

    def near(d: np.ndarray) -> np.ndarray:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic(v: np.ndarray, ix: np.ndarray, iy: np.ndarray, padding_mode: int, align_corners: bool) -> np.ndarray:
    """16 taps around each point, each tap's coordinate padded on its own (as torch does)."""
    h, w = v.shape[2:]
    x0, y0 = np.floor(ix), np.floor(iy)
    wx, wy = _cubic_weights(ix - x0), _cubic_weights(iy - y0)
    total = np.zeros((v.shape[0], v.shape[1], *ix.shape[1:]), dtype=v.dtype)
    for i in range(4):
        ty = _pad_coord(y0 + (i - 1), h, padding_mode, align_corners).astype(np.intp)
        for j in range(4):
            tx = _pad_coord(x0 + (j - 1), w, padding_mode, align_corners).astype(np.intp)
            total += (wy[i] * wx[j])[:, None] * _tap(v, ty, tx)
    return total


def _bilinear_sample(v: np.ndarray, ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
    x0, y0 = np.floor(ix), np.floor(iy)
    wx, wy = (ix - x0)[:, None], (iy - y0)[:, None]
    x0, y0 = x0.astype(np.intp), y0.astype(np.intp)
    top = _tap(v, y0, x0) * (1 - wx) + _tap(v, y0, x0 + 1) * wx
    bottom = _tap(v, y0 + 1, x0) * (1 - wx) + _tap(v, y0 + 1, x0 + 1) * wx
    return top * (1 - wy) + bottom * wy


@kernel("aten::grid_sampler_2d.out", dtypes=FLOAT_DTYPES)
def grid_sampler_2d_out(
    x: np.ndarray, grid: np.ndarray, interpolation_mode: int, padding_mode: int, align_corners: bool, out: np.ndarray
) -> np.ndarray:
    """Sample x (N, C, H, W) at grid (N, Ho, Wo, 2) holding (x, y) in [-1, 1].

    interpolation_mode: 0 bilinear, 1 nearest, 2 bicubic; padding_mode: 0 zeros, 1 border,
    2 reflection.
    """
    if interpolation_mode not in (0, 1, 2) or padding_mode not in (0, 1, 2):
        raise KernelError(f"grid_sampler_2d: interpolation {interpolation_mode}, padding {padding_mode} unsupported")
    v = x  # in x's own dtype, float16 included, as torch's CPU kernel computes
    g = cast(grid, v.dtype)
    ix = _unnormalize(g[..., 0], x.shape[3], align_corners)
    iy = _unnormalize(g[..., 1], x.shape[2], align_corners)
    if interpolation_mode == 2:
        return store(out, _bicubic(v, ix, iy, padding_mode, align_corners))
    ix = _pad_coord(ix, x.shape[3], padding_mode, align_corners)
    iy = _pad_coord(iy, x.shape[2], padding_mode, align_corners)
    if interpolation_mode == 1:
        return store(out, _tap(v, np.rint(iy).astype(np.intp), np.rint(ix).astype(np.intp)))
    return store(out, _bilinear_sample(v, ix, iy))
