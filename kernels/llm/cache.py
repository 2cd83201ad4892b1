"""`llama::update_cache.out` and `llama::update_cache_with_indices.out`: write new keys or values into a KV cache.

Layout (ExecuTorch's): value `[B, S, H, D]`, cache `[B, S_max, H, D]`, the sequence at dim 1. The cache is the
program's state (a mutable buffer): the kernel writes into it in place, and its `out` is a 1-element dummy whose value
it leaves alone (ExecuTorch's kernel does too). A write past the cache is a MethodInputError, the error of a
position the caller gave, never an IndexError or a silent clip.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from etbuild.errors import KernelError, MethodInputError
from etbuild.runtime.kernel_registry import REAL_DTYPES, kernel
from etbuild.runtime.tensor import resize


def _check_shapes(op: str, value: np.ndarray, cache: np.ndarray) -> None:
    if value.ndim != 4 or cache.ndim != 4:
        raise KernelError(f"{op}: value and cache must be 4-d [B, S, H, D], got {list(value.shape)} and "
                          f"{list(cache.shape)}")
    if value.dtype is not cache.dtype and value.dtype != cache.dtype:
        raise KernelError(f"{op}: value is {value.dtype}, the cache {cache.dtype}")
    v, c = value.shape, cache.shape
    if v[0] != c[0] or v[2] != c[2] or v[3] != c[3]:
        raise KernelError(f"{op}: value {list(value.shape)} does not fit cache {list(cache.shape)} "
                          "(dims 0, 2 and 3 must match)")


def check_position(op: str, start_pos: int, length: int, capacity: int) -> None:
    """MethodInputError unless positions start_pos … start_pos + length - 1 are inside a cache of `capacity`."""
    if start_pos < 0 or start_pos + length > capacity:
        raise MethodInputError(f"{op}: positions {start_pos}…{start_pos + length - 1} are past the KV cache, "
                               f"which holds positions 0…{capacity - 1}")


def position(start_pos: int | Callable[[], int]) -> Callable[[], int]:
    """A fast path's position argument (KernelInfo.live: a number, or a callable giving it at each call) as a
    callable."""
    return start_pos if callable(start_pos) else functools.partial(int, start_pos)


def _update_cache_fast(value: np.ndarray, cache: np.ndarray, start_pos: int | Callable[[], int],
                       out: np.ndarray) -> Callable[[], None] | None:
    """The write of these arrays at the position of each call (a decode step's), checked as the kernel checks it;
    None unless out is the kernel's 1-element dummy."""
    if out.shape != (1,):
        return None
    at, length, capacity = position(start_pos), value.shape[1], cache.shape[1]

    def write() -> None:
        start = at()
        check_position("llama::update_cache", start, length, capacity)
        cache[:, start:start + length] = value

    return write


@kernel("llama::update_cache.out", dtypes=REAL_DTYPES, mutates=(1,), fast=_update_cache_fast, live=(2,))
def update_cache_out(value: np.ndarray, cache: np.ndarray, start_pos: int, out: np.ndarray) -> np.ndarray:
    """cache[:, start_pos : start_pos + S] = value, in place."""
    _check_shapes("llama::update_cache", value, cache)
    check_position("llama::update_cache", start_pos, value.shape[1], cache.shape[1])
    cache[:, start_pos:start_pos + value.shape[1]] = value
    return out if out.shape == (1,) else resize(out, (1,))


@kernel("llama::update_cache_with_indices.out", dtypes=REAL_DTYPES, mutates=(1,))
def update_cache_with_indices_out(value: np.ndarray, cache: np.ndarray, start_pos: int, indices: np.ndarray,
                                  out: np.ndarray) -> np.ndarray:
    """cache[b, indices[b, s]] = value[b, s], in place; `start_pos` is not read (as in ExecuTorch's kernel)."""
    op = "llama::update_cache_with_indices"
    _check_shapes(op, value, cache)
    if indices.ndim != 2 or indices.shape != value.shape[:2] or indices.dtype.kind not in "iu":
        raise KernelError(f"{op}: indices must be integer [B, S] = {list(value.shape[:2])}, got "
                          f"{indices.dtype}{list(indices.shape)}")
    if indices.size and (indices.min() < 0 or indices.max() >= cache.shape[1]):
        raise MethodInputError(f"{op}: an index is past the KV cache, which holds positions 0…{cache.shape[1] - 1} "
                               f"(indices {int(indices.min())}…{int(indices.max())})")
    for b in range(value.shape[0]):
        cache[b, indices[b]] = value[b]
    return resize(out, (1,))
