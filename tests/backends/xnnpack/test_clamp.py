"""The fused output clamp of a float node (grids.Grid.snapper) is numpy's clip, specials included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.runtime.grids import Grid

VALUES = np.array([-np.inf, -7.5, -0.0, 0.0, 1e-40, 2.5, 6.0, 6.000001, 1e30, np.inf, np.nan], np.float32)


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 6.0), (-1.0, 1.0), (0.0, math.inf), (-math.inf, 6.0)])
def test_fused_clamp_is_numpys_clip(lo: float, hi: float) -> None:
    snap = Grid(DT.FP32).snapper(lo, hi)
    assert snap is not None
    got = np.tile(VALUES, (3, 1))
    snap(got)
    np.testing.assert_array_equal(got, np.tile(np.clip(VALUES, np.float32(lo), np.float32(hi)), (3, 1)))
    assert got.dtype == np.float32


def test_no_clamp_no_snap() -> None:
    assert Grid(DT.FP32).snapper() is None
