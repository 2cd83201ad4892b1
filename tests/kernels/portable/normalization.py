"""Conformance specs of the etbuild.kernels.portable.normalization kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()


def running_stats(g: Gen, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A running mean and a positive running variance."""
    return g.t((channels,)), g.t((channels,), low=0.1, high=2.0)


def layer_norm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 8)), [8], g.t((8,)), g.t((8,)), 1e-5))
    yield Case((g.t((2, 3, 8), layout="t"), [3, 8], g.t((3, 8)), None, 1e-3))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [5], None, None, 1e-5))
    yield Case((g.t((0, 4)), [4], g.t((4,)), g.t((4,)), 1e-5))


def batch_norm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4, 5)), g.t((3,)), g.t((3,)), *running_stats(g, 3), 0.1, 1e-5))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), None, g.t((3,)), *running_stats(g, 3), 0.1, 1e-3))
    yield Case((g.t((4, 3)), g.t((3,)), None, *running_stats(g, 3), 0.1, 1e-5))
    yield Case((g.t((2, 3, 6), layout="t"), g.t((3,)), g.t((3,)), *running_stats(g, 3), 0.1, 1e-5))


def group_norm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 6, 4, 5)), g.t((6,)), g.t((6,)), 2, 6, 20, 3, 1e-5))
    yield Case((g.t((2, 6, 4, 5), layout="cl"), None, None, 2, 6, 20, 1, 1e-5))
    yield Case((g.t((2, 4, 3)), g.t((4,)), None, 2, 4, 3, 4, 1e-3))


def bn_train_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((4, 3, 2, 2)), g.t((3,)), g.t((3,)), *running_stats(g, 3), True, 0.1, 1e-5))
    yield Case((g.t((4, 3, 5), layout="t"), None, None, *running_stats(g, 3), True, 0.3, 1e-3))
    yield Case((g.t((4, 3)), g.t((3,)), g.t((3,)), *running_stats(g, 3), False, 0.1, 1e-5))


def bn_no_stats_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((4, 3, 2, 2)), g.t((3,)), g.t((3,)), True, 0.1, 1e-5))
    yield Case((g.t((4, 3, 5), layout="t"), None, None, True, 0.3, 1e-3))


SPECS.add("aten::native_layer_norm.out", layer_norm_cases, tol=10)
SPECS.add("aten::_native_batch_norm_legit_no_training.out", batch_norm_cases, tol=10)
SPECS.add("aten::native_group_norm.out", group_norm_cases, tol=10)
SPECS.add("aten::_native_batch_norm_legit.out", bn_train_cases, tol=10, mutates=(3, 4))
SPECS.add("aten::_native_batch_norm_legit.no_stats_out", bn_no_stats_cases, tol=10)
