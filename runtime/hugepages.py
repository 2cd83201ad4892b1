"""Constant arrays a program packs at load, placed side by side in memory the kernel may back with 2 MiB pages.

A decode step streams every weight of a language model once: with 4 KiB pages a 3 MB filter crosses 768 pages,
and the TLB misses cap the read at about two thirds of the machine's bandwidth (measured here: 36 filters of
512 x 1,536 float32, 113 MB, in 5.5 ms from separate arrays, 3.6 ms from one huge-page region). numpy asks for huge
pages only for its own allocations over 4 MiB, one array at a time, so a model's many smaller filters never get
them. While an `Arena` is current (`with arena():`, which a program holds while it binds a method's delegates),
`place(array)` copies a packed constant of at least `SMALLEST` bytes into the arena's anonymous mappings, advised
`MADV_HUGEPAGE`, and returns the copy; with no arena, or where the platform has no such advice, it returns the
array as it is. The copy holds the same values, so nothing computed changes.

An arena maps `CHUNK` bytes at a time (more for a larger array) and never reuses space: its memory lives as long
as any array placed in it. Pages are committed as they are written, so a chunk's unused tail costs at most one
huge page.
"""

from __future__ import annotations

import contextlib
import contextvars
import mmap
from collections.abc import Iterator

import numpy as np

CHUNK = 32 << 20
SMALLEST = 64 << 10  # smaller constants stay where they are: they fit in the caches
ALIGN = 64  # a cache line: the compiled loops' vector loads

_current: contextvars.ContextVar[Arena | None] = contextvars.ContextVar("etbuild_arena", default=None)


class Arena:
    """Anonymous mappings advised for huge pages, handed out front to back."""

    def __init__(self, chunk: int = CHUNK) -> None:
        self.chunk = chunk
        self._free: np.ndarray | None = None  # the current mapping's unused bytes

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array of `shape` and `dtype` in the arena, `ALIGN`-aligned."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        need = nbytes + ALIGN
        if self._free is None or self._free.nbytes < need:
            self._free = _mapping(max(self.chunk, need))
        skip = -self._free.ctypes.data % ALIGN
        block, self._free = self._free[skip:skip + nbytes], self._free[-(-(skip + nbytes) // ALIGN) * ALIGN:]
        return block.view(dtype).reshape(shape)

    def copy(self, array: np.ndarray) -> np.ndarray:
        """A C-contiguous copy of `array` in the arena."""
        out = self.empty(array.shape, array.dtype)
        out[...] = array
        return out


def _mapping(size: int) -> np.ndarray:
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        with contextlib.suppress(OSError):  # a kernel built without transparent huge pages
            region.madvise(advice)
    return np.frombuffer(region, np.uint8)


@contextlib.contextmanager
def arena() -> Iterator[Arena]:
    """Make a new arena current for the block (nested blocks share the outer one)."""
    outer = _current.get()
    if outer is not None:
        yield outer
        return
    token = _current.set(Arena())
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def place(array: np.ndarray) -> np.ndarray:
    """`array` copied into the current arena when there is one, the platform advises huge pages and the array has
    at least `SMALLEST` bytes; else `array` itself."""
    current = _current.get()
    if current is None or array.nbytes < SMALLEST or not hasattr(mmap, "MADV_HUGEPAGE"):
        return array
    return current.copy(array)
