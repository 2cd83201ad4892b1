"""etbuild.kernels.numerics.ufuncs: ufuncs and matmuls bound once to their operands and output."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from etbuild.kernels.numerics.ufuncs import EXACT_UFUNCS, as_out_shape, bound_ufunc, matmul_add

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("fn", [np.add, np.maximum, np.minimum, np.multiply, np.tanh])
def test_bound_ufunc_computes_what_the_ufunc_does_into_out(fn: np.ufunc) -> None:
    operands = [RNG.standard_normal((3, 4)).astype(np.float32) for _ in range(fn.nin)]
    out = np.empty((3, 4), np.float32)
    step = bound_ufunc(fn, *operands, out=out)
    step()
    np.testing.assert_array_equal(out, fn(*operands))
    operands[0][...] = 7  # bound to the arrays: later calls read their new contents
    step()
    np.testing.assert_array_equal(out, fn(*operands))


def test_exact_ufuncs_are_the_correctly_rounded_binary_ones() -> None:
    assert np.add in EXACT_UFUNCS and np.maximum in EXACT_UFUNCS
    assert np.power not in EXACT_UFUNCS and np.exp not in EXACT_UFUNCS


def test_as_out_shape_views_unit_dim_broadcasts_and_keeps_the_rest() -> None:
    bias = np.arange(4, dtype=np.float32)
    view = as_out_shape(bias, (1, 4))
    assert view.shape == (1, 4) and np.shares_memory(view, bias)
    assert as_out_shape(bias, (3, 4)) is bias  # a real broadcast: left to numpy
    assert as_out_shape(bias, (4,)) is bias
    strided = np.arange(8, dtype=np.float32)[::2]
    assert as_out_shape(strided.reshape(4, 1)[:, 0], (1, 4)).shape == (1, 4)
    transposed = np.arange(6, dtype=np.float32).reshape(2, 3).T  # a reshape of it would copy
    assert as_out_shape(transposed, (6,)) is transposed


@pytest.mark.parametrize("product", [np.matmul, np.dot])
@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_add_is_the_product_then_the_bias(
    product: Callable[..., np.ndarray], rows: int, with_bias: bool
) -> None:
    a, b = RNG.standard_normal((rows, 6)).astype(np.float32), RNG.standard_normal((6, 3)).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32) if with_bias else None
    out = np.empty((rows, 3), np.float32)
    matmul_add(product, a, b, bias, out)()
    want = np.matmul(a, b)
    if bias is not None:
        want += bias
    np.testing.assert_array_equal(out, want)
