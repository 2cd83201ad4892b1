"""The arena that places a program's packed constants in memory advised for huge pages."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from etbuild.runtime import hugepages

needs_advice = pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE on this platform")


def test_without_an_arena_place_returns_the_array_itself():
    a = np.arange(1 << 16, dtype=np.float32)
    assert hugepages.place(a) is a


@needs_advice
def test_place_copies_large_arrays_into_the_arena_aligned_and_leaves_small_ones():
    rng = np.random.default_rng(0)
    big = [rng.standard_normal((n, 129), dtype=np.float32) for n in (200, 513, 1000)]
    small = np.ones(7, np.int8)
    with hugepages.arena():
        placed = [hugepages.place(a) for a in big]
        assert hugepages.place(small) is small
    for a, p in zip(big, placed):
        assert p is not a and p.flags.c_contiguous and p.flags.writeable
        assert p.ctypes.data % hugepages.ALIGN == 0
        np.testing.assert_array_equal(p, a)
    spans = sorted((p.ctypes.data, p.ctypes.data + p.nbytes) for p in placed)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))  # side by side, never overlapping


@needs_advice
def test_an_array_larger_than_a_chunk_gets_a_mapping_of_its_own_and_nested_arenas_share_one():
    arena = hugepages.Arena(chunk=1 << 16)
    a = arena.empty((3, 1 << 15), np.float32)  # 384 KiB > the 64 KiB chunk
    a[...] = 1.5
    assert a.shape == (3, 1 << 15) and float(a.sum()) == 1.5 * a.size
    with hugepages.arena() as outer, hugepages.arena() as inner:
        assert inner is outer


def test_a_programs_xnnpack_filters_are_placed_while_its_delegates_load(tmp_path, monkeypatch):
    """The packed filter of a one-row FullyConnected goes through `place` inside the program's arena, and the
    program computes what torch does."""
    torch = pytest.importorskip("torch")
    from etbuild.backends.xnnpack.runtime.ops import gemm
    from etbuild.pipeline import compile_module
    from etbuild.recipe.config import BackendConfig
    from etbuild.runtime.program import Program

    placed: list[tuple[tuple[int, ...], bool]] = []

    def recording(array: np.ndarray) -> np.ndarray:
        placed.append((array.shape, hugepages._current.get() is not None))
        return hugepages.place(array)

    monkeypatch.setattr(gemm, "place", recording)
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 512).eval()
    x = torch.randn(1, 256)
    path = tmp_path / "linear.pte"
    path.write_bytes(compile_module(model, (x,), backends=(BackendConfig("xnnpack"),)).pte)
    method = Program.load(path).load_method("forward")
    assert placed and all(in_arena for _, in_arena in placed)
    np.testing.assert_allclose(method(x.numpy())[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
