"""The shared kernel helpers: torch's promotion rules, erf, direct writes, dims."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from etbuild.errors import KernelError
from etbuild.kernels.portable import common

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
]
SCALARS = [True, 2, 2.5]


def operand(kind: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros((2,) if kind == "dim" else (), dtype=dtype)


@pytest.mark.parametrize(("ka", "kb"), [("dim", "dim"), ("dim", "zero"), ("zero", "zero"), ("zero", "dim")])
def test_result_dtype_matches_torch_for_tensor_pairs(ka: str, kb: str) -> None:
    for a, b in itertools.product(DTYPES, DTYPES):
        ta, tb = operand(ka, a), operand(kb, b)
        want = torch.empty(0, dtype=torch.result_type(ta, tb)).numpy().dtype
        assert common.result_dtype(ta.numpy(), tb.numpy()) == want, (ka, a, kb, b)


@pytest.mark.parametrize("kind", ["dim", "zero"])
def test_result_dtype_matches_torch_with_python_scalars(kind: str) -> None:
    for a, s in itertools.product(DTYPES, SCALARS):
        ta = operand(kind, a)
        want = torch.empty(0, dtype=torch.result_type(ta, s)).numpy().dtype
        assert common.result_dtype(ta.numpy(), s) == want, (kind, a, s)


def test_result_dtype_needs_an_operand() -> None:
    with pytest.raises(KernelError, match="no operand"):
        common.result_dtype(None)


def test_erf_is_accurate_in_float64() -> None:
    xs = np.concatenate([np.linspace(-7, 7, 2001), [0.0, -0.0, 1e-300, 2.9999, 3.0, 3.0001, 26.0]])
    want = np.array([math.erf(x) for x in xs])
    np.testing.assert_allclose(common.erf(xs), want, rtol=4e-15, atol=1e-300)
    special = common.erf(np.array([np.inf, -np.inf, np.nan]))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2])


def test_erf_float32_stays_float32_and_is_within_2_5e_7_relative() -> None:
    xs = np.concatenate([np.linspace(-6, 6, 120001), [0.0, -0.0, 1e-30, 3.9, 4.0, 4.1, 30.0]]).astype(np.float32)
    want = np.array([math.erf(float(x)) for x in xs])
    got = common.erf(xs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=1e-30)
    assert common.erf(np.array([4.2, 30.0, np.inf], np.float32)).tolist() == [1.0, 1.0, 1.0]
    special = common.erf(np.array([np.inf, -np.inf, np.nan], dtype=np.float16))
    assert special.dtype == np.float32 and special[0] == 1 and special[1] == -1 and np.isnan(special[2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_writes_into_out_even_when_it_is_the_input(dtype: type) -> None:
    x = np.linspace(-3, 3, 61).astype(dtype)
    want = common.erf(x)
    work = x.copy()
    assert common.erf(work, out=work) is work
    np.testing.assert_array_equal(work, want)
    scalar = np.empty((), dtype)
    assert common.erf(np.array(0.5, dtype), out=scalar) is scalar and scalar == common.erf(np.array([0.5], dtype))[0]


def test_horner_evaluates_lowest_coefficient_first() -> None:
    z = np.array([0.0, 1.0, 2.0])
    np.testing.assert_array_equal(common.horner(z, [1.0, 2.0, 3.0]), 1 + 2 * z + 3 * z * z)


def test_direct_writes_only_when_no_promotion_or_resize_is_needed() -> None:
    a, b = np.ones((2, 3), np.float32), np.full((3,), 2.0, np.float32)
    out = np.zeros((2, 3), np.float32)
    assert common.direct(np.add, out, a, b) is out and (out == 3).all()
    assert common.direct(np.add, out, a, b.astype(np.float64)) is None
    assert common.direct(np.add, out, a, 2.0) is None
    assert common.direct(np.add, np.zeros((2, 3), np.float16), a.astype(np.float16), a.astype(np.float16)) is None
    small = np.zeros((3,), np.float32)
    assert common.direct(np.add, small, b, a) is None and (small == 0).all()


def test_wrap_dim_accepts_0_and_minus_1_on_scalars_only() -> None:
    assert common.wrap_dim(-1, 0) == 0
    assert common.wrap_dim(-1, 3) == 2
    with pytest.raises(KernelError, match="dim 3 is out of range for a 3-d tensor"):
        common.wrap_dim(3, 3)


def test_reduce_axes_treats_none_and_empty_as_all() -> None:
    assert common.reduce_axes(None, 3) == (0, 1, 2)
    assert common.reduce_axes([], 2) == (0, 1)
    assert common.reduce_axes([-1, 0, 2], 3) == (0, 2)
    assert common.reduce_axes(0, 0) == ()
