"""aten::convolution.out against torch on the geometries its fast paths special-case.

The conformance spec covers one case per feature; these sweep the depthwise tap loop (stride
phases, dilation, channel multipliers, channels-first and channels-last grids, 1-D/2-D/3-D)
and the im2col path (1×1, grouped, batched, transposed) in every float dtype, with strided
inputs and non-contiguous outs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from etbuild.runtime.kernel_registry import load_all

CONV = load_all()["aten::convolution.out"].fn
TOL = {torch.float32: 2e-5, torch.float64: 1e-12, torch.float16: 3e-3}

# (input shape, weight shape, stride, padding, dilation, groups, transposed)
CASES = [
    ((1, 8, 7, 6), (8, 1, 3, 3), [1, 1], [1, 1], [1, 1], 8, False),
    ((2, 6, 9, 8), (6, 1, 3, 3), [2, 2], [1, 1], [1, 1], 6, False),
    ((1, 4, 10, 9), (4, 1, 3, 2), [3, 2], [2, 0], [1, 2], 4, False),
    ((1, 4, 8, 8), (12, 1, 3, 3), [1, 2], [1, 1], [2, 1], 4, False),
    ((1, 5, 5, 5), (5, 1, 5, 5), [1, 1], [2, 2], [1, 1], 5, False),
    ((1, 6, 3, 3), (6, 1, 3, 3), [2, 2], [0, 0], [1, 1], 6, False),
    ((2, 3, 11), (6, 1, 3), [2], [1], [2], 3, False),
    ((1, 3, 4, 5, 6), (3, 1, 2, 3, 2), [1, 2, 1], [1, 0, 1], [1, 1, 2], 3, False),
    ((1, 64, 3, 3), (64, 1, 3, 3), [1, 1], [1, 1], [1, 1], 64, False),
    ((2, 40, 5, 4), (40, 1, 3, 3), [2, 2], [1, 1], [1, 2], 40, False),
    ((1, 48, 6), (48, 1, 3), [1], [1], [1], 48, False),
    ((1, 16, 5, 5), (24, 16, 1, 1), [1, 1], [0, 0], [1, 1], 1, False),
    ((2, 16, 5, 5), (24, 16, 1, 1), [2, 2], [0, 0], [1, 1], 1, False),
    ((2, 6, 7, 7), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], 2, False),
    ((1, 40, 21), (8, 40, 3), [1], [1], [1], 1, False),
    ((1, 4, 5, 5), (4, 1, 3, 3), [2, 2], [1, 1], [1, 1], 4, True),
    ((2, 4, 6, 5), (4, 2, 3, 3), [2, 1], [1, 0], [1, 2], 2, True),
]


def _reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, case: tuple) -> torch.Tensor:
    _, _, stride, padding, dilation, groups, transposed = case
    up = (lambda t: t.double()) if x.dtype == torch.float16 else (lambda t: t)
    ref = torch.ops.aten.convolution(
        up(x), up(w), None if b is None else up(b), stride, padding, dilation, transposed, [0] * len(stride), groups
    )
    return ref.to(x.dtype)


def _case_id(case: tuple) -> str:
    return f"{list(case[0])}*{list(case[1])}s{case[2]}d{case[4]}g{case[5]}{'T' if case[6] else ''}"


def _out(shape: tuple[int, ...], dtype: np.dtype, layout: str) -> np.ndarray:
    """A NaN-filled out array, C-ordered or a transposed (non-contiguous) view."""
    if layout == "contiguous":
        return np.full(shape, np.nan, dtype)
    return np.full(shape[::-1], np.nan, dtype).T


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_convolution_matches_torch(case: tuple, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(case[0], generator=g, dtype=torch.float64).to(dtype)
    w = torch.randn(case[1], generator=g, dtype=torch.float64).to(dtype)
    out_channels = w.shape[1] * case[5] if case[6] else w.shape[0]
    for bias in (None, torch.randn(out_channels, generator=g, dtype=torch.float64).to(dtype)):
        want = _reference(x, w, bias, case).numpy()
        for layout in ("contiguous", "transposed"):
            xs = x if layout == "contiguous" else x.transpose(-1, -2).contiguous().transpose(-1, -2)
            out = _out(want.shape, want.dtype, layout)
            args = (xs.numpy(), w.numpy(), None if bias is None else bias.numpy(), *case[2:5], case[6])
            got = CONV(*args, [0] * len(case[2]), case[5], out)
            assert got is out
            np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])
