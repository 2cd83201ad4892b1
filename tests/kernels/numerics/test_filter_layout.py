"""The probe that picks the layout of a constant filter for the BLAS in use (kernels/numerics/filter_layout.py)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from etbuild.kernels.numerics import blas, filter_layout
from etbuild.runtime import hugepages


@pytest.fixture(autouse=True)
def _fresh_probe():
    filter_layout._measured.cache_clear()
    yield
    filter_layout._measured.cache_clear()


@pytest.mark.parametrize("m, k, n", [(1, 1024, 1024), (4, 16, 16), (2, 8192, 4096)])
def test_one_row_a_tiny_product_and_a_huge_filter_keep_the_default(m, k, n):
    for default in (True, False):
        assert filter_layout.kn_faster(m, k, n, default) is default
    assert filter_layout._measured.cache_info().currsize == 0  # nothing was timed


def test_a_product_is_timed_once_a_shape_and_rows_past_the_probes_are_timed_at_its_rows():
    first = filter_layout.kn_faster(300, 256, 256, default=False)
    assert isinstance(first, bool)
    assert filter_layout.kn_faster(500, 256, 256, default=False) is first  # both timed at PROBE_ROWS rows
    assert filter_layout._measured.cache_info().misses == 1
    filter_layout.kn_faster(64, 256, 256, default=False)
    assert filter_layout._measured.cache_info().misses == 2


def test_layouts_that_give_other_bits_keep_the_default(monkeypatch):
    """A BLAS whose two calls round differently: the probe's answer would then change results, so it never
    overrides the default, however the timings fall."""
    one_call = blas._one_call

    def skewed(product, a, b, out, *args):
        call = one_call(product, a, b, out, *args)
        if b.flags.c_contiguous:  # the [K, N] layout: one more rounding
            def rounded() -> None:
                call()
                out[0, 0] = np.nextafter(out[0, 0], np.float32(np.inf))
            return rounded
        return call

    monkeypatch.setattr(blas, "_one_call", skewed)
    assert filter_layout.kn_faster(64, 256, 512, default=True) is True
    assert filter_layout.kn_faster(64, 256, 512, default=False) is False


def test_the_faster_layout_wins(monkeypatch):
    """With the [N, K] layout's calls made slow, the probe picks [K, N], and the reverse."""
    one_call = blas._one_call

    def slowed(slow_kn: bool, product, a, b, out, *args):
        call = one_call(product, a, b, out, *args)
        if b.flags.c_contiguous != slow_kn:
            return call

        def slow() -> None:
            for _ in range(3):
                call()
        return slow

    monkeypatch.setattr(filter_layout, "ROUNDS", 6)  # best of five timed rounds: a preempted one cannot decide
    for slow_kn in (False, True):
        filter_layout._measured.cache_clear()
        monkeypatch.setattr(blas, "_one_call", functools.partial(slowed, slow_kn))
        assert filter_layout.kn_faster(64, 256, 256, default=slow_kn) is (not slow_kn)


def test_the_probe_takes_nothing_from_the_arena_a_program_is_loading_into():
    with hugepages.arena() as arena:
        before = arena._free
        filter_layout.kn_faster(64, 256, 256, default=False)
        assert arena._free is before
