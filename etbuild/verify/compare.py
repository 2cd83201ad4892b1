"""How verify compares the program's outputs with eager torch: a bound relative to the output's magnitude.

An output passes when its largest absolute error over all samples is at most
`rtol × max|eager| + atol` (the recipe's `verify.rtol` and `verify.atol`): a deep fp32
network's error grows with the size of its values, so an element near zero may be off by
more than `rtol` of itself while the output is as exact as float32 allows. Integer and
boolean outputs must match exactly. Each output's report states the error found, the
largest eager magnitude and the bound used, and whether the eager values vary across the
samples: an output that does not (torchvision's ViT zero-initialises its classifier, so
every output is 0) proves nothing, and verify then compares an intermediate value as well
(`etbuild.verify.intermediate`).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def bound(expected: list[np.ndarray], rtol: float, atol: float) -> float:
    """The largest absolute error allowed: `rtol × max|expected| + atol`, or 0 for integer and bool values."""
    if not all(np.issubdtype(e.dtype, np.floating) for e in expected):
        return 0.0
    return rtol * magnitude(expected) + atol


def magnitude(values: list[np.ndarray]) -> float:
    """The largest finite absolute value in `values` (0 when there is none)."""
    finite = [np.abs(v[np.isfinite(v)]).max(initial=0.0) for v in values if v.size]
    return float(max(finite, default=0.0))


def varies(expected: list[np.ndarray]) -> bool | None:
    """Whether the values differ between samples; None with one sample (nothing to tell)."""
    if len(expected) < 2:
        return None
    return any(not np.array_equal(expected[0], e, equal_nan=True) for e in expected[1:])


def max_abs_error(expected: list[np.ndarray], actual: list[np.ndarray]) -> float:
    """The largest |actual − expected| over all samples; NaN where only one side is NaN counts as infinite."""
    worst = 0.0
    for e, a in zip(expected, actual):
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        diff = np.abs(a64 - e64)
        both_nan = np.isnan(e64) & np.isnan(a64)
        same_inf = np.isinf(e64) & (e64 == a64)
        diff = np.where(both_nan | same_inf, 0.0, np.nan_to_num(diff, nan=np.inf))
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst


def compare_output(expected: list[np.ndarray], actual: list[np.ndarray], rtol: float, atol: float) -> dict[str, Any]:
    """One output over all samples: shape, dtype, error found, magnitude, bound, variation, pass/fail."""
    exp, act = [np.asarray(e) for e in expected], [np.asarray(a) for a in actual]
    report: dict[str, Any] = {"shape": list(exp[0].shape), "dtype": str(exp[0].dtype)}
    mismatch = [f"{a.dtype}{list(a.shape)}" for e, a in zip(exp, act) if (e.shape, e.dtype) != (a.shape, a.dtype)]
    if mismatch:
        return {**report, "passed": False, "mismatch": f"the program gives {mismatch[0]}"}
    error, allowed = max_abs_error(exp, act), bound(exp, rtol, atol)
    return {**report, "max_abs_error": error, "max_abs_expected": magnitude(exp), "bound": allowed,
            "varies": varies(exp), "passed": error <= allowed}


def compare(
    expected: list[list[np.ndarray]], actual: list[list[np.ndarray]], rtol: float, atol: float
) -> list[dict[str, Any]]:
    """Per output index (samples × outputs in, one report per output out)."""
    return [{"index": k, **compare_output([s[k] for s in expected], [s[k] for s in actual], rtol, atol)}
            for k in range(len(expected[0]))]


def describe(output: dict[str, Any]) -> str:
    """`max abs error 0.2 > bound 0.033 (= rtol × max|eager| 330 + atol)`, or the shape mismatch."""
    if "mismatch" in output:
        return f"expected {output['dtype']}{output['shape']}, {output['mismatch']}"
    return (f"max abs error {output['max_abs_error']:.3g} > bound {output['bound']:.3g} "
            f"(rtol × max|eager| {output['max_abs_expected']:.3g} + atol)")
