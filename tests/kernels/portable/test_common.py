"""The shared kernel helpers: torch's promotion rules, direct writes, dims."""

from __future__ import annotations

import itertools

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
