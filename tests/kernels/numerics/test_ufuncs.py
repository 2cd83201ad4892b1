"""etbuild.kernels.numerics.ufuncs: ufuncs and matmuls bound once to their operands and output."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from etbuild.kernels.numerics.ufuncs import BIAS_ROW, EXACT_UFUNCS, as_out_shape, bias_rows, bound_ufunc, matmul_add

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


@pytest.mark.parametrize(("rows", "n"), [(1, 5), (7, 3), (2304, 48), (36, 192), (12, 1), (6, BIAS_ROW + 1), (97, 100)])
@pytest.mark.parametrize("product", [np.matmul, np.dot])
def test_a_constant_bias_tiled_along_longer_rows_gives_the_same_bits(
    product: Callable[..., np.ndarray], rows: int, n: int
) -> None:
    a, b = RNG.standard_normal((rows, 4)).astype(np.float32), RNG.standard_normal((4, n)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    general, tiled = np.empty((rows, n), np.float32), np.empty((rows, n), np.float32)
    step = matmul_add(product, a, b, bias, tiled, constant_bias=True)
    for _ in range(2):  # bound to a: a later call reads its new contents
        matmul_add(product, a, b, bias, general)()
        step()
        np.testing.assert_array_equal(tiled, general)
        np.testing.assert_array_equal(general, np.matmul(a, b) + bias)
        a *= -2


def test_bias_rows_tiles_by_the_largest_divisor_that_fits_and_leaves_the_rest() -> None:
    bias = np.arange(48, dtype=np.float32)
    out = np.zeros((2304, 48), np.float32)
    rows, tiled = bias_rows(bias, out)
    assert rows.shape == (16, 144 * 48) and np.shares_memory(rows, out) and tiled.shape == (144 * 48,)
    np.add(rows, tiled, rows)
    np.testing.assert_array_equal(out, np.broadcast_to(bias, out.shape))
    prime_rows = np.zeros((1153, 48), np.float32)  # a prime count of rows, too many to tile all: k = 1
    assert bias_rows(bias, prime_rows)[0] is prime_rows
    strided = np.zeros((4, 96), np.float32)[:, ::2]
    assert bias_rows(bias, strided)[0] is strided  # not contiguous: as given
    one = np.zeros((1, 48), np.float32)
    assert bias_rows(bias, one)[0] is one  # one row: nothing to tile
    wide = np.zeros((3, BIAS_ROW), np.float32)
    assert bias_rows(np.zeros(BIAS_ROW, np.float32), wide)[0] is wide
