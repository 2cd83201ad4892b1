"""The kernels' fast paths (no promotion, no resize, one numpy call into out) give bit for bit
what their general (promoting) paths compute: each kernel's result is compared with the
general path's recipe written out in numpy, on cases that take the fast path and on
neighbouring ones that do not (float16, int8, broadcasting, out-of-range scalars, strided out)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from etbuild.kernels.portable import common, compare
from etbuild.runtime.kernel_registry import load_all

KERNELS = load_all()
RNG = np.random.default_rng(0)


def _k(name: str):  # noqa: ANN202
    return KERNELS[name].fn


def _same_bits(x: np.ndarray, y: np.ndarray) -> None:
    assert x.dtype == y.dtype and x.shape == y.shape
    assert x.tobytes() == y.tobytes()


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("float"):
        v = RNG.standard_normal(shape) * 3
        v.flat[:: max(v.size // 3, 1)] = np.nan if v.size > 2 else v.flat[0]
        return v.astype(dtype)
    return RNG.integers(-20, 20, shape).astype(dtype)


@pytest.mark.parametrize("op", ["gt.Scalar_out", "lt.Scalar_out", "ge.Scalar_out", "eq.Scalar_out", "ne.Scalar_out"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "float16", "int8"])
@pytest.mark.parametrize(
    "value", [0.5, 0, 5, -1e39, 3.4028235677973366e38, 1e-46, 0.1, 16777217, 2**62 + 1, 2**64, True, 1000]
)
def test_compare_scalar_matches_promoted(op: str, dtype: str, value: object) -> None:
    fn = _k(f"aten::{op}")
    x = _data((4, 16), dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = compare.COMPARE[f"aten::{op}"](
                common.cast(x, common.result_dtype(x, value)), common.cast(value, common.result_dtype(x, value))
            )
        except OverflowError:
            with pytest.raises(OverflowError):
                fn(x, value, np.empty((4, 16), bool))
            return
        got = fn(x, value, np.empty((4, 16), bool))
    _same_bits(got, expected)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16", "uint8"])
@pytest.mark.parametrize("shapes", [((4, 16), (4, 16)), ((4, 16), (16,)), ((4, 1), (1, 16)), ((), (3,))])
def test_binary_tensor_fast_paths(dtype: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a, b = _data(shapes[0], dtype), _data(shapes[1], dtype)
    shape = np.broadcast_shapes(*shapes)
    for name, ufunc in [*compare.COMPARE.items(), *compare.LOGICAL.items()]:
        if name.endswith("Scalar_out"):
            continue
        _same_bits(_k(name)(a, b, np.empty(shape, bool)), ufunc(a, b))
    with np.errstate(all="ignore"):
        for name, ufunc in [("aten::mul.out", np.multiply), ("aten::maximum.out", np.maximum)]:
            expected = ufunc(a, b, dtype=common.opmath(a.dtype)).astype(dtype)
            _same_bits(_k(name)(a, b, np.empty(shape, a.dtype)), expected)
        expected = np.add(a, b, dtype=common.opmath(a.dtype)).astype(dtype)
        _same_bits(_k("aten::add.out")(a, b, 1, np.empty(shape, a.dtype)), expected)


def test_sub_of_bools_still_raises() -> None:
    a = _data((4, 16), "bool")
    with pytest.raises(Exception, match="bool"):
        _k("aten::sub.out")(a, a, 1, np.empty((4, 16), bool))


def test_bad_broadcast_still_reports_shapes() -> None:
    a, b = _data((4, 16), "float32"), _data((3,), "float32")
    for name in ["aten::gt.Tensor_out", "aten::logical_and.out", "aten::where.self_out"]:
        args = (a > 0, a, b) if "where" in name else (a, b)
        with pytest.raises(Exception, match="broadcast"):
            _k(name)(*args, np.empty((4, 16), np.float32 if "where" in name else bool))


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "bool"])
def test_where_fast_path(dtype: str) -> None:
    cond = _data((4, 16), "bool")
    a, b = _data((4, 16), dtype), _data((16,), dtype)
    _same_bits(_k("aten::where.self_out")(cond, a, b, np.empty((4, 16), dtype)), np.where(cond, a, b))


@pytest.mark.parametrize("shape", [(4, 16), (3, 1000), (1000, 3), (2, 130, 7), (1, 16), (5,)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "int8", "float16"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_and_mean_match_numpy(shape: tuple[int, ...], dtype: str, keepdim: bool) -> None:
    x = _data(shape, dtype)
    acc = x.dtype if x.dtype.kind == "f" else np.dtype(np.int64)
    dims = [[], [0], [-1], list(range(len(shape)))[1:]]
    for dim in dims:
        axes = common.reduce_axes(dim, x.ndim)
        expected = np.sum(x.astype(common.opmath(acc)), axis=axes, keepdims=keepdim).astype(acc)
        got = _k("aten::sum.IntList_out")(x, dim, keepdim, None, np.empty(expected.shape, acc))
        _same_bits(got, expected)
        if x.dtype.kind == "f":
            with np.errstate(all="ignore"):
                expected = np.mean(x.astype(common.opmath(acc)), axis=axes, keepdims=keepdim).astype(acc)
            got = _k("aten::mean.out")(x, dim, keepdim, None, np.empty(expected.shape, acc))
            _same_bits(got, expected)


def test_sum_into_strided_out_takes_the_general_path() -> None:
    x = _data((64, 300), "float32")
    expected = np.sum(x, axis=0)
    out = np.empty((300, 2), np.float32)[:, 0]
    _same_bits(_k("aten::sum.IntList_out")(x, [0], False, None, out).copy(), expected)
