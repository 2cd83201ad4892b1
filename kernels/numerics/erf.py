"""The error function (numpy has none), and the coefficients of every erf the runtimes evaluate.

Three evaluations, each with its own bits, all defined here:
- `erf`: float64 within a few ulp of the exact erf (Taylor series, then a Chebyshev erfc);
  float16/float32 in float32 as tanh(x·P(x²)) (`erf32`, coefficients ERF32_TANH);
- `ERF_SQRT_HALF_TANH`: the same tanh form with the 1/√2 of GELU's erf(x/√2) folded in (the XNNPACK
  runtime's numpy GELU);
- `GELU_P`, `GELU_Q`: a rational erf(x/√2) for the compiled GELU loop (kernels/native_loops.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

FLOAT16, FLOAT32, FLOAT64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def horner(z: np.ndarray, coefs: Sequence[float], out: np.ndarray | None = None) -> np.ndarray:
    """Σ coefs[k]·zᵏ by Horner's rule in z's dtype (at least two coefs), into out if given."""
    acc = np.multiply(z, coefs[-1], out=out)
    acc += coefs[-2]
    for c in coefs[-3::-1]:
        acc *= z
        acc += c
    return acc


_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
# erf(x)/x = Σ cₙ(x²)ⁿ; for |x| < 0.5 the 13 terms reach 1e-17 relative.
_ERF_TAYLOR = tuple(_TWO_OVER_SQRT_PI * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(13))
# erfc(a) = exp(−a²)·t·S(y) on 0.5 <= a <= 6 with t = 2/(2 + a) in [0.25, 0.8] and y = (2t − 1.05)/0.55:
# S = c₀/2 + Σ cₖ·Tₖ(y), Chebyshev coefficients of exp(a²)·erfc(a)/t interpolated at 60 nodes in
# 50-digit arithmetic (mpmath); the first omitted one is below 1e-19. Above 6, erf is 1 in float64.
_ERFC_CHEB = (
    1.0989285902384596557,
    0.19863814860634424788,
    0.021017557492874383253,
    0.00062330038760694793987,
    -0.00012351630643154491377,
    -8.188588865359774053e-6,
    1.2829549924191963623e-6,
    6.9117060247387300078e-8,
    -1.8810462606342433896e-8,
    1.7952779943317838285e-11,
    2.7408515792360124765e-10,
    -2.1202480021323491139e-11,
    -2.6147492379152748008e-12,
    6.147061244393843275e-13,
    -1.8956142513781618171e-14,
    -9.1172239550659134947e-15,
    1.4768818936769706002e-15,
    -1.3425727591117425007e-17,
    -2.7875339420935672015e-17,
    4.2700374071887697179e-18,
)
# float32: erf(x) ≈ tanh(x·P(x²)) for |x| <= 4 (erf rounds to 1 beyond): P is fitted to atanh(erf)
# by least squares with Lawson reweighting toward the minimax relative error of tanh(x·P(x²))
# against 40-digit erf at 40,001 points (9.5e-8). 16 passes over the array (the rational fit it
# replaces took 26); evaluated in float32, within 2.5e-7 relative and 1.7e-7 absolute of erf.
ERF32_CLAMP = 4.2  # P still rises past 4, to where float32 tanh gives exactly 1
ERF32_TANH = (
    1.1283792743413015,
    0.10276905483847452,
    -0.00019182704965068755,
    -0.0006197894548191245,
    8.763982097679111e-05,
    -5.66901992221253e-06,
    1.4189323999449533e-07,
)
# erf(x/√2) = tanh(x·Q(x²)) with erf32's P and its 1/√2 folded into the coefficients, Q_k = P_k / (√2·2^k),
# in float32; the clamp scaled to match.
ERF_SQRT_HALF_TANH = tuple(np.float32(c / (math.sqrt(2) * 2**k)) for k, c in enumerate(ERF32_TANH))
ERF_SQRT_HALF_CLAMP = np.float32(ERF32_CLAMP * math.sqrt(2))

# GELU: x·Φ(x) = h + h·erf(x/√2) with h = x/2, erf(x/√2) ≈ u·P(u²)/Q(u²) on u = x clamped to
# ±GELU_CLAMP and then clamped to [-1, 1]. P (degree 5) and Q (degree 5, Q(0) = 1) were fitted to
# erf(t)/t on t ∈ [0, 4] by linearised least squares on 20,001 points, reweighted toward the minimax
# relative error (Loeb's iteration, then Lawson's weights): 2.5e-8 in exact arithmetic; then scaled
# from t to x = t·√2. In float32 erf(x/√2) is within 3.6e-7 of the exact value and GELU within
# 1.1e-6 absolute (torch's float32 gelu: 1.2e-6), tested against float64 in tests/kernels/test_native.py.
GELU_P = (
    0.7978845238685608, 0.06842729449272156, 0.009387081488966942,
    0.0003432310186326504, 1.2576176231959835e-05, 4.3903622071184145e-08,
)
GELU_Q = (
    1.0, 0.2524271607398987, 0.028837157413363457,
    0.001900873496197164, 7.40966570447199e-05, 1.1694036174958455e-06,
)
GELU_CLAMP = 5.147101  # where u·P(u²)/Q(u²) reaches 1.0f: beyond it erf(x/√2) is exactly ±1


def _erf_taylor(x: np.ndarray) -> np.ndarray:
    """erf(x) for |x| < 0.5 in float64."""
    acc = horner(np.square(x), _ERF_TAYLOR)
    acc *= x
    return acc


def _erfc_chebyshev(a: np.ndarray) -> np.ndarray:
    """erfc(a) for 0.5 <= a <= 6 in float64, by Clenshaw's recurrence on 2y."""
    half_t = np.reciprocal(a + 2.0)
    y2 = half_t * (8 / 0.55)
    y2 -= 2 * 1.05 / 0.55
    b1, b2, b0 = np.full_like(a, _ERFC_CHEB[-1]), np.zeros_like(a), np.empty_like(a)
    for c in _ERFC_CHEB[-2:0:-1]:
        np.multiply(y2, b1, out=b0)
        b0 -= b2
        b0 += c
        b0, b1, b2 = b2, b0, b1
    b1 *= y2
    b1 *= 0.5
    b1 -= b2
    b1 += _ERFC_CHEB[0] / 2
    b1 *= half_t
    b1 *= 2.0
    np.square(a, out=b2)
    np.negative(b2, out=b2)
    b1 *= np.exp(b2, out=b2)
    return b1


def _erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64: a Taylor series below 0.5 in magnitude, 1 − erfc above."""
    a = np.abs(x)
    small = a < 0.5
    if small.all():
        return _erf_taylor(x)
    big = 1.0 - _erfc_chebyshev(np.clip(a, 0.5, 6.0))
    np.copysign(big, x, out=big)
    if not small.any():
        return big
    return np.where(small, _erf_taylor(np.where(small, x, 0.0)), big)


def _tanh_form(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """erf in float32 as tanh(x·P(x²)) on the clamped input (out may be x)."""
    u = np.clip(x, -ERF32_CLAMP, ERF32_CLAMP, out=out)
    p = horner(np.square(u), ERF32_TANH)
    p *= u
    return np.tanh(p, out=u)


@np.errstate(all="ignore")
def erf(x: np.ndarray) -> np.ndarray:
    """The error function of x as a new array of x's shape: float16/float32 in float32, else in float64.

    float64 is within a few ulp of the exact erf; float32 within 2.5e-7 relative (torch's
    vectorized float32 erf is within 1.5e-7 absolute).
    """
    x = np.asarray(x)
    v = np.atleast_1d(x)  # 0-d arrays would compute in numpy scalars
    if x.dtype in (FLOAT32, FLOAT16):
        return _tanh_form(v.astype(FLOAT32, copy=False)).reshape(x.shape)
    return _erf64(v.astype(FLOAT64, copy=False)).reshape(x.shape)


@np.errstate(all="ignore")
def erf32(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """erf of float16/float32 x computed in float32 into the float32 array out (which may be x); returns out."""
    _tanh_form(np.atleast_1d(x).astype(FLOAT32, copy=False), np.atleast_1d(out))
    return out
