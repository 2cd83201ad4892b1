"""max_pool2d_with_indices against torch: the tap loop's tie, NaN, −inf and padding rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from etbuild.runtime.kernel_registry import load_all

MAX_POOL = load_all()["aten::max_pool2d_with_indices.out"].fn

# (input shape, kernel, stride, padding, dilation, ceil_mode)
CASES = [
    ((1, 3, 1, 11), [1, 2], [1, 2], [0, 0], [1, 1], False),
    ((2, 3, 7, 6), [3, 3], [2, 2], [1, 1], [1, 1], True),
    ((2, 2, 9, 8), [2, 3], [1, 2], [1, 1], [2, 2], False),
    ((3, 5, 5), [3, 2], [2, 1], [1, 1], [1, 2], True),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{list(c[0])}k{c[1]}s{c[2]}p{c[3]}d{c[4]}{'c' if c[5] else ''}")
def test_max_pool_matches_torch_with_ties_nans_and_infinities(case: tuple, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-3, 4, case[0], generator=g).to(dtype)  # small integers: many ties
    flat = x.view(-1)
    flat[::7] = math.nan
    flat[3::11] = -math.inf
    flat[5::13] = math.inf
    x[..., :2, :] = -math.inf  # whole windows of −inf, some with padding
    want, want_idx = torch.ops.aten.max_pool2d_with_indices(x, *case[1:])
    out = np.zeros(tuple(want.shape), x.numpy().dtype)
    idx = np.zeros(tuple(want.shape), np.int64)
    got, got_idx = MAX_POOL(x.numpy(), *case[1:], out, idx)
    assert got is out and got_idx is idx
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(got_idx, want_idx.numpy())
