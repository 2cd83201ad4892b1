"""Lifetimes and planners: no two live tensors share bytes; greedy sits between bound and naive."""

from __future__ import annotations

import random

import pytest

from etbuild.memory.lifetimes import TensorLife, lifetimes, peak_live_bytes
from etbuild.memory.planners import PLANNERS, arena_size
from etbuild.runtime.format import program as fb


def _t(sizes, **kw) -> fb.EValue:
    return fb.EValue(fb.Tensor(scalar_type=fb.ScalarType.FLOAT, sizes=sizes, dim_order=bytes(range(len(sizes))), **kw))


def _call(*args) -> fb.Instruction:
    return fb.Instruction(fb.KernelCall(0, list(args)))


def test_lifetimes_of_a_chain():
    # x -> a -> b -> y ; a constant weight is not planned
    values = [_t([4]), _t([4], data_buffer_idx=1), _t([8]), _t([2]), _t([4])]
    plan = fb.ExecutionPlan(
        values=values, inputs=[0], outputs=[4],
        chains=[fb.Chain(instructions=[_call(0, 1, 2, 2), _call(2, 3, 3), _call(3, 4, 4)])],
    )
    assert lifetimes(plan) == [
        TensorLife(0, 16, -1, 0), TensorLife(2, 32, 0, 1), TensorLife(3, 8, 1, 2), TensorLife(4, 16, 2, 3),
    ]


def test_peak_live_bytes_counts_aligned_sizes():
    lives = [TensorLife(0, 10, 0, 1), TensorLife(1, 20, 1, 2), TensorLife(2, 40, 2, 3)]
    assert peak_live_bytes(lives, 16) == 32 + 48


def _random_lives(rng: random.Random, n: int) -> list[TensorLife]:
    lives = []
    for i in range(n):
        start = rng.randrange(0, 40)
        lives.append(TensorLife(i, rng.choice([4, 16, 100, 1000, 4096]), start, start + rng.randrange(0, 10)))
    return lives


@pytest.mark.parametrize("planner", sorted(PLANNERS))
@pytest.mark.parametrize("seed", range(5))
def test_live_tensors_never_share_bytes(planner, seed):
    lives = _random_lives(random.Random(seed), 60)
    offsets = PLANNERS[planner](lives, 16)
    for a in lives:
        assert offsets[a.value] % 16 == 0
        for b in lives:
            if a.value < b.value and a.overlaps(b):
                a0, b0 = offsets[a.value], offsets[b.value]
                assert a0 + a.nbytes <= b0 or b0 + b.nbytes <= a0, (a, b)


@pytest.mark.parametrize("seed", range(5))
def test_greedy_is_between_the_lower_bound_and_naive(seed):
    lives = _random_lives(random.Random(seed), 60)
    greedy = arena_size(lives, PLANNERS["greedy"](lives, 16), 16)
    naive = arena_size(lives, PLANNERS["naive"](lives, 16), 16)
    assert peak_live_bytes(lives, 16) <= greedy <= naive
