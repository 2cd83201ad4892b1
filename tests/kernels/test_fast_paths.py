"""Kernels' load-time fast paths and views give what the kernels give, bit for bit, on every
conformance case (and so match torch): the step is made from the arguments before the kernel
runs, as the runtime makes it at load, then run after the kernel into outs reset to garbage."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from etbuild.runtime import aliasing
from etbuild.runtime.kernel_registry import KernelInfo, load_all
from tests.kernels import conformance

REGISTRY = load_all()
FAST = sorted(name for name, info in REGISTRY.items() if info.fast is not None or info.view is not None)


def load_time_step(info: KernelInfo, args: tuple[Any, ...]) -> Callable[[], Any] | None:
    """What the runtime binds for a call of these arguments (see Binder._fast_step)."""
    views = aliasing.views_of(info, args)
    if views is not None:
        outs = args[-1] if isinstance(args[-1], list) else [args[-1]]
        return aliasing.copy_step(views, outs)
    return info.fast(*args) if info.fast is not None else None


def checked(info: KernelInfo, used: list[int]) -> Callable[..., Any]:
    """The kernel, followed by its fast step (when it has one for the arguments) compared bit for bit."""

    def run(*args: Any) -> Any:
        step = load_time_step(info, args)
        result = info.fn(*args)
        if step is None:
            return result
        outs = args[-1] if isinstance(args[-1], list) else [args[-1]]
        want = [np.array(o, copy=True) for o in outs]
        for o in outs:
            o[...] = conformance.sentinel(o.dtype)
        step()
        for o, w in zip(outs, want):
            assert o.dtype == w.dtype and o.shape == w.shape
            assert o.tobytes() == w.tobytes(), f"{info.name}: the fast path differs"
        used.append(1)
        return result

    return run


@pytest.mark.parametrize("name", FAST)
def test_fast_path_matches_the_kernel(name: str) -> None:
    info = REGISTRY[name]
    used: list[int] = []
    fast_info = dataclasses.replace(info, fn=checked(info, used))
    failures = [
        f"[{r.dtype}] {f}"
        for r in (conformance.check(name, d, fast_info) for d in info.dtypes or (None,))
        for f in r.failures
    ]
    assert not failures, "\n".join(failures)
    assert used, f"{name}: no conformance case takes its fast path"


def test_the_common_kernels_have_fast_paths() -> None:
    for name in ("aten::add.out", "aten::mul.out", "aten::sigmoid.out", "aten::tanh.out", "aten::addmm.out",
                 "aten::relu.out", "aten::convolution.out"):
        assert REGISTRY[name].fast is not None, name
    for name in ("aten::view_copy.out", "aten::slice_copy.Tensor_out", "aten::split_with_sizes_copy.out",
                 "aten::squeeze_copy.dims_out", "aten::unsqueeze_copy.out", "aten::permute_copy.out"):
        assert REGISTRY[name].view is not None, name


@pytest.mark.parametrize("name", ["aten::add.out", "aten::mul.out", "aten::sub.out", "aten::div.out"])
def test_a_broadcast_over_unit_dims_is_bound_as_a_view_of_out_s_shape(name: str) -> None:
    """(1, 64) with (1, 1, 64): the fast step gets the operand reshaped (no broadcast per call),
    still reads the operand's memory (a later write to it is seen) and gives the kernel's bytes."""
    info = REGISTRY[name]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 1, 64)).astype(np.float32)
    b = rng.standard_normal((1, 64)).astype(np.float32) + 2
    out, want = np.empty((1, 1, 64), np.float32), np.empty((1, 1, 64), np.float32)
    extra = (1,) if name in ("aten::add.out", "aten::sub.out") else ()
    step = info.fast(a, b, *extra, out)
    assert step is not None
    assert all(x.shape == out.shape for x in step.args[:2] if isinstance(x, np.ndarray))
    b[...] = rng.standard_normal((1, 64)).astype(np.float32) + 2  # written after load, as a planned value is
    step()
    info.fn(a, b, *extra, want)
    assert out.tobytes() == want.tobytes()


def test_cat_binds_one_concatenate_of_its_parts() -> None:
    parts = [np.full((1, 1, 4), float(i), np.float32) for i in range(50)]
    out = np.empty((50, 1, 4), np.float32)
    step = REGISTRY["aten::cat.out"].fast(parts, 0, out)
    assert step is not None
    parts[7][...] = -1.0  # the parts are read at call time
    step()
    assert out[7].tolist() == [[-1.0] * 4] and out[49].tolist() == [[49.0] * 4]
    assert REGISTRY["aten::cat.out"].fast([p.astype(np.float64) for p in parts], 0, out) is None  # a cast: the kernel


@pytest.mark.parametrize("exponent", [2.0, 3.0, -0.5, -1.0, -2.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_by_a_small_exponent_is_torch_s_bits_and_binds_no_np_power(exponent: float, dtype: type) -> None:
    """torch computes these without pow (x·x, (x·x)·x, 1/sqrt, 1/x, 1/(x·x)); so do the kernel and its
    fast step, which gets scratch of its own when out is x (in place)."""
    import torch

    info = REGISTRY["aten::pow.Tensor_Scalar_out"]
    x = (np.random.default_rng(1).random((33, 65)) * 4 + 0.1).astype(dtype)
    want = torch.pow(torch.from_numpy(x), exponent).numpy()
    out = np.empty_like(x)
    assert info.fn(x, exponent, out).tobytes() == want.tobytes()
    step = info.fast(x, exponent, out)
    assert getattr(step, "func", None) is not np.power
    out[...] = 0
    step()
    assert out.tobytes() == want.tobytes()
    in_place = x.copy()
    info.fast(in_place, exponent, in_place)()
    assert in_place.tobytes() == want.tobytes()


@pytest.mark.parametrize("bits", [4, 8])
def test_an_embedding_fast_path_checks_its_indices_on_every_call(bits: int) -> None:
    """The lookup is bound to the indices' array; a row outside the table read later is a KernelError."""
    from etbuild.errors import KernelError

    name = "embedding_4bit" if bits == 4 else "embedding_byte"
    info = REGISTRY[f"quantized_decomposed::{name}.dtype_out"]
    rng = np.random.default_rng(0)
    weight = rng.integers(0, 256, (6, 8), dtype=np.uint8)  # 4 bits: 16 columns
    scales = rng.random((6, 2), dtype=np.float32)
    indices, out = np.array([[1, 5]], np.int64), np.empty((1, 2, 16 if bits == 4 else 8), np.float32)
    step = info.fast(weight, scales, None, -8, 7, indices, None, out)
    assert step is not None
    step()
    assert out.tobytes() == info.fn(weight, scales, None, -8, 7, indices, None, out.copy()).tobytes()
    for bad in (6, -1):
        indices[0, 1] = bad
        with pytest.raises(KernelError, match=f"index {bad} is out of range for a table of 6 rows"):
            step()
