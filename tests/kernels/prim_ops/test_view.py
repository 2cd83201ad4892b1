"""et_view aliases its input, and refuses shapes it cannot view."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.errors import KernelError
from etbuild.kernels.prim_ops.view import et_view


def test_result_shares_the_input_memory():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = et_view(x, [2, -1])
    x[0, 0] = 42.0
    assert view.shape == (2, 6) and view[0, 0] == 42.0


@pytest.mark.parametrize(
    ("x", "size", "message"),
    [
        (np.zeros((3, 4)).T, [12], "cannot be viewed as [12]"),
        (np.zeros((3, 4)), [5, -1], "cannot be viewed as [5, -1]"),
        (np.zeros((3, 4)), [-1, -1], "may hold one -1"),
        (np.zeros((3, 4)), [-2, -6], "may hold one -1"),
    ],
)
def test_refused_shapes(x, size, message):
    with pytest.raises(KernelError, match=message.replace("[", r"\[").replace("]", r"\]")):
        et_view(x, size)
