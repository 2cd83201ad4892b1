"""etbuild.quantize.metrics: SNR, top-1 agreement and the accuracy gate."""

from __future__ import annotations

import math

import pytest
import torch

from etbuild.quantize.metrics import (
    Energy,
    db,
    float_columns,
    from_relative_noise,
    gate_holds,
    gate_value,
    snr_db,
    top1_agreement,
)
from etbuild.recipe import AccuracyConfig


def test_snr_of_a_known_noise() -> None:
    ref = torch.ones(100)
    assert snr_db([ref], [ref * 1.1]) == pytest.approx(20.0)  # noise energy 1% of the signal
    assert snr_db([ref, ref], [ref, ref * 1.1]) == pytest.approx(23.0103, abs=1e-4)  # half the noise overall


def test_snr_limits() -> None:
    assert snr_db([torch.ones(3)], [torch.ones(3)]) == math.inf
    assert snr_db([torch.zeros(3)], [torch.ones(3)]) == -math.inf
    assert from_relative_noise(0.0) == math.inf and from_relative_noise(0.1) == pytest.approx(10.0)


def test_energy_accumulates_in_float64() -> None:
    energy = Energy()
    energy.add(torch.tensor([3.0, 4.0]), torch.tensor([3.0, 3.0]))
    assert (energy.signal, energy.noise, energy.relative_noise) == (25.0, 1.0, 0.04)
    assert Energy().relative_noise == 0.0


def test_top1_agreement_counts_rows_and_skips_scalars() -> None:
    ref = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    test = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    assert top1_agreement([ref], [test]) == 0.75
    assert top1_agreement([torch.tensor(1.0)], [torch.tensor(2.0)]) == 1.0


def test_float_columns_leave_integer_outputs_out() -> None:
    samples = [[torch.ones(2), torch.tensor([1])], [torch.zeros(2), torch.tensor([2])]]
    columns = float_columns(samples, samples)
    assert len(columns) == 1 and [t.tolist() for t in columns[0][0]] == [[1.0, 1.0], [0.0, 0.0]]
    assert float_columns([], []) == []


def test_the_gate_takes_the_worst_output() -> None:
    ref = [[torch.ones(4), torch.ones(4)]]
    test = [[torch.ones(4) * 1.1, torch.ones(4) * 1.01]]
    snr = AccuracyConfig(min_snr_db=30)
    assert gate_value(snr, ref, test) == pytest.approx(20.0)
    assert not gate_holds(snr, 20.0) and gate_holds(snr, 30.0)
    top1 = AccuracyConfig(top1_agreement=0.9)
    assert gate_value(top1, ref, test) == 1.0 and gate_holds(top1, 0.9) and not gate_holds(top1, 0.89)
    assert gate_holds(AccuracyConfig(), -math.inf)  # no threshold: always holds


def test_db_for_json() -> None:
    assert db(12.3456) == 12.35
    assert db(math.inf) is None and db(-math.inf) is None and db(math.nan) is None
