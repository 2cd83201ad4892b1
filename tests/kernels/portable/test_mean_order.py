"""aten::mean sums in ExecuTorch's portable kernel's order (one after another, in index order) and divides by the
count in the accumulation dtype: bit for bit ExecuTorch's runtime on programs of one mean, through our runtime
(so the load-time fast path too) and through the kernel called directly."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.kernels.portable.reduction import mean_out
from tests.conftest import HAS_EXECUTORCH

CASES = [  # shape, dim, keepdim, dtype
    ((8, 512), [-1], True, "float32"),
    ((1, 3, 512), [-1], True, "float32"),
    ((3, 5, 7), [1], False, "float32"),
    ((3, 5, 7), [0, 2], True, "float32"),
    ((4, 6, 33), [-1, 1], False, "float32"),
    ((5, 9), None, False, "float32"),
    ((7, 130), [1], True, "float64"),
    ((2, 0, 3), [1], False, "float32"),
    ((0, 4), [1], True, "float32"),
]


def _sequential(x: np.ndarray, dim: list[int] | None, keepdim: bool) -> np.ndarray:
    """The reference: a Python loop over the reduced elements in index order, in x's dtype."""
    axes = tuple(range(x.ndim)) if dim is None else tuple(sorted(d % x.ndim for d in dim))
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    count = int(np.prod([x.shape[a] for a in axes]))
    rows = moved.reshape(x.size // count if count else int(np.prod(moved.shape[: x.ndim - len(axes)])), count)
    sums = np.zeros(rows.shape[0], x.dtype)
    for j in range(rows.shape[1]):
        sums = (sums + rows[:, j]).astype(x.dtype)
    with np.errstate(all="ignore"):
        means = sums / x.dtype.type(rows.shape[1])
    return means.reshape(np.mean(x, axis=axes, keepdims=keepdim).shape)


@pytest.mark.parametrize(("shape", "dim", "keepdim", "dtype"), CASES)
def test_the_kernel_sums_in_index_order(shape, dim, keepdim, dtype) -> None:  # noqa: ANN001
    x = (np.random.default_rng(len(shape)).standard_normal(shape) ** 2).astype(dtype)
    expected = _sequential(x, dim, keepdim)
    got = mean_out(x, dim, keepdim, None, np.empty(expected.shape, dtype))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.interop
@pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")
@pytest.mark.parametrize(("shape", "dim", "keepdim", "dtype"), [c for c in CASES if 0 not in c[0]])
def test_executorchs_portable_mean_bit_for_bit(shape, dim, keepdim, dtype, tmp_path) -> None:  # noqa: ANN001
    torch = pytest.importorskip("torch")
    from executorch.runtime import Runtime

    from etbuild.runtime import Program
    from tests.conftest import executorch_pte

    class Mean(torch.nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN202
            return x.mean(dim, keepdim=keepdim) if dim is not None else x.mean()

    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(dtype)
    path = executorch_pte(Mean(), (torch.from_numpy(x),), tmp_path / "mean.pte")
    theirs = Runtime.get().load_program(str(path)).load_method("forward")
    ours = Program.load(path).load_method("forward")
    for _ in range(3):
        x = (rng.standard_normal(shape) ** 2 * 3).astype(dtype)
        expected = theirs.execute([torch.from_numpy(x)])[0].numpy()
        np.testing.assert_array_equal(np.asarray(ours(x)[0]), expected)
        np.testing.assert_array_equal(mean_out(x, dim, keepdim, None, np.empty_like(expected)), expected)
