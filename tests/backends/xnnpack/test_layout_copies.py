"""backends/xnnpack/runtime/ops/layout.permuted_copy: the bound transpose copy, per index of a short last dim."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.runtime.ops.layout import permuted_copy

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(("shape", "perm"), [
    ((1, 3, 96, 96), (0, 2, 3, 1)),  # NCHW -> NHWC of an image: copied per channel
    ((2, 5, 7, 13), (0, 2, 3, 1)),  # odd sizes, a batch
    ((4, 1, 33), (2, 0, 1)),  # a last dim of 1
    ((8, 9, 70), (2, 1, 0)),  # a last dim over the short limit: one copy
    ((3, 4), (1, 0)),  # too small to split
    ((6, 64, 2), (0, 2, 1)),  # the source contiguous along out's last dim
])
def test_permuted_copy_is_the_transpose_on_every_call(shape: tuple[int, ...], perm: tuple[int, ...]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    out = np.empty([shape[p] for p in perm], np.float32)
    step = permuted_copy(out, x.transpose(perm))
    for _ in range(2):  # bound to x: a later call copies its new contents
        step()
        np.testing.assert_array_equal(out, np.transpose(x, perm))
        x *= -3
