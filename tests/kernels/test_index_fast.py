"""The load-time fast steps of embedding, gather and index_select check their indices at every call, as the
kernels do: an index that goes out of range after binding is a KernelError, not a wrapped or clipped read."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.errors import KernelError
from etbuild.runtime.kernel_registry import load_all

REGISTRY = load_all()


def test_embedding_step_reads_rows_and_refuses_an_index_out_of_range() -> None:
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    indices, out = np.array([[3, 0, 2]]), np.empty((1, 3, 3), np.float32)
    step = REGISTRY["aten::embedding.out"].fast(weight, indices, -1, False, False, out)
    step()
    np.testing.assert_array_equal(out, weight[indices])
    for bad in (4, -1):
        indices[0, 1] = bad
        with pytest.raises(KernelError, match="out of range"):
            step()


def test_gather_step_gathers_and_refuses_an_index_out_of_range() -> None:
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    index, out = np.array([[4, 0], [1, 1]]), np.empty((2, 2), np.float32)
    step = REGISTRY["aten::gather.out"].fast(x, 1, index, False, out)
    step()
    np.testing.assert_array_equal(out, np.take_along_axis(x, index, 1))
    for bad in (5, -1):
        index[1, 0] = bad
        with pytest.raises(KernelError):
            step()


def test_index_select_step_selects_and_refuses_an_index_out_of_range() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    index, out = np.array([3, 0, -1]), np.empty((2, 3, 3), np.float32)
    step = REGISTRY["aten::index_select.out"].fast(x, 1, index, out)
    step()
    np.testing.assert_array_equal(out, np.take(x, index, axis=1))  # -1 is the last, as the kernel reads it
    for bad in (4, -5):
        index[1] = bad
        with pytest.raises(KernelError, match="out of range"):
            step()
