"""etbuild.kernels.numerics.erf: the float64 and float32 erf, their in-place form, and the folded coefficients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from etbuild.kernels.numerics import erf as E


def test_erf_is_accurate_in_float64() -> None:
    xs = np.concatenate([np.linspace(-7, 7, 2001), [0.0, -0.0, 1e-300, 2.9999, 3.0, 3.0001, 26.0]])
    want = np.array([math.erf(x) for x in xs])
    np.testing.assert_allclose(E.erf(xs), want, rtol=4e-15, atol=1e-300)
    special = E.erf(np.array([np.inf, -np.inf, np.nan]))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2])


def test_erf_float32_stays_float32_and_is_within_2_5e_7_relative() -> None:
    xs = np.concatenate([np.linspace(-6, 6, 120001), [0.0, -0.0, 1e-30, 3.9, 4.0, 4.1, 30.0]]).astype(np.float32)
    want = np.array([math.erf(float(x)) for x in xs])
    got = E.erf(xs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=1e-30)
    assert E.erf(np.array([4.2, 30.0, np.inf], np.float32)).tolist() == [1.0, 1.0, 1.0]
    special = E.erf(np.array([np.inf, -np.inf, np.nan], dtype=np.float16))
    assert special.dtype == np.float32 and special[0] == 1 and special[1] == -1 and np.isnan(special[2])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_erf_is_close_to_torch_on_random_inputs(dtype: type) -> None:
    x = (np.random.default_rng(0).standard_normal((7, 33)) * 2.5).astype(dtype)
    want = torch.erf(torch.from_numpy(x).to(torch.float64)).numpy()
    got = E.erf(x)
    assert got.shape == x.shape and got.dtype == (np.float64 if dtype == np.float64 else np.float32)
    rtol, atol = (4e-15, 0) if dtype == np.float64 else (2.5e-7, 2e-7)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_erf_keeps_the_shape_of_a_0d_input() -> None:
    got = E.erf(np.array(0.5, np.float32))
    assert got.shape == () and got == E.erf(np.array([0.5], np.float32))[0]


def test_erf32_writes_into_out_even_when_it_is_the_input() -> None:
    x = np.linspace(-3, 3, 61).astype(np.float32)
    want = E.erf(x)
    work = x.copy()
    assert E.erf32(work, work) is work
    np.testing.assert_array_equal(work, want)
    other = np.empty_like(x)
    assert E.erf32(x.astype(np.float16), other) is other
    np.testing.assert_array_equal(other, E.erf(x.astype(np.float16)))
    scalar = np.empty((), np.float32)
    assert E.erf32(np.array(0.5, np.float32), scalar) is scalar and scalar == E.erf(np.array([0.5], np.float32))[0]


def test_horner_evaluates_lowest_coefficient_first() -> None:
    z = np.array([0.0, 1.0, 2.0])
    np.testing.assert_array_equal(E.horner(z, [1.0, 2.0, 3.0]), 1 + 2 * z + 3 * z * z)
    out = np.empty(3)
    assert E.horner(z, [1.0, 2.0], out=out) is out


def test_folded_coefficients_give_erf_of_x_over_root_2() -> None:
    """tanh(x·Q(x²)) on x clamped to ERF_SQRT_HALF_CLAMP, in float32, is erf32 at x/√2 up to rounding."""
    x = np.linspace(-8, 8, 4001).astype(np.float32)
    u = np.clip(x, -E.ERF_SQRT_HALF_CLAMP, E.ERF_SQRT_HALF_CLAMP)
    got = np.tanh(E.horner(np.square(u), E.ERF_SQRT_HALF_TANH) * u)
    assert got.dtype == np.float32
    want = np.array([math.erf(float(v) / math.sqrt(2)) for v in x])
    np.testing.assert_allclose(got, want, rtol=5e-7, atol=3e-7)


def test_gelu_rational_coefficients_give_erf_of_x_over_root_2() -> None:
    """u·P(u²)/Q(u²) clamped to [-1, 1] on u = x clamped to ±GELU_CLAMP (the compiled loop's erf), in float32:
    within 3.6e-7 of erf(x/√2)."""
    f = np.float32
    x = np.linspace(-8, 8, 4001).astype(f)
    u = np.clip(x, f(-E.GELU_CLAMP), f(E.GELU_CLAMP))
    z = u * u
    ratio = E.horner(z, [f(c) for c in E.GELU_P]) / E.horner(z, [f(c) for c in E.GELU_Q])
    got = np.clip(u * ratio, f(-1), f(1))
    assert got.dtype == f
    want = np.array([math.erf(float(v) / math.sqrt(2)) for v in x])
    np.testing.assert_allclose(got, want, rtol=0, atol=3.6e-7)
