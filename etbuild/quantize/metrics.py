"""Accuracy measures of quantized outputs against float ones, and the recipe's gate.

SNR (dB) = 10·log10(Σ ref² / Σ (ref − test)²) over every sample; `inf` when test equals ref.
Top-1 agreement is the fraction of rows (all dims but the last) whose argmax agrees. The gate
(`quantize.accuracy`) takes the lowest over the float outputs of either. Imports no torchao:
verify uses it on any recipe.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from etbuild.recipe import AccuracyConfig

Outputs = list[list[torch.Tensor]]
"""Per sample, the flattened outputs."""


class Energy:
    """Running Σ ref² and Σ (ref − test)² of one compared value."""

    def __init__(self) -> None:
        self.signal = 0.0
        self.noise = 0.0

    def add(self, ref: torch.Tensor, test: torch.Tensor) -> None:
        ref64, test64 = ref.detach().double(), test.detach().double()
        self.signal += float(ref64.square().sum())
        self.noise += float((ref64 - test64).square().sum())

    @property
    def relative_noise(self) -> float:
        return self.noise / self.signal if self.signal else (0.0 if self.noise == 0 else math.inf)

    @property
    def snr_db(self) -> float:
        return from_relative_noise(self.relative_noise)


def from_relative_noise(relative_noise: float) -> float:
    """An SNR in dB from noise / signal: inf for no noise, -inf for noise without signal."""
    if relative_noise <= 0:
        return math.inf
    return -math.inf if math.isinf(relative_noise) else -10 * math.log10(relative_noise)


def snr_db(ref: Iterable[torch.Tensor], test: Iterable[torch.Tensor]) -> float:
    """The SNR of `test` against `ref` over pairs of tensors."""
    energy = Energy()
    for r, t in zip(ref, test):
        energy.add(r, t)
    return energy.snr_db


def top1_agreement(ref: Sequence[torch.Tensor], test: Sequence[torch.Tensor]) -> float:
    """The fraction of rows (all dims but the last) whose argmax over the last dim agrees."""
    same = total = 0
    for r, t in zip(ref, test):
        if r.dim() == 0 or r.numel() == 0:
            continue
        a, b = r.reshape(-1, r.shape[-1]).argmax(-1), t.reshape(-1, t.shape[-1]).argmax(-1)
        same += int((a == b).sum())
        total += a.numel()
    return same / total if total else 1.0


def float_columns(reference: Outputs, quantized: Outputs) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """Per float output, its values over every sample: (reference, quantized)."""
    count = len(reference[0]) if reference else 0
    columns = [([s[k] for s in reference], [s[k] for s in quantized]) for k in range(count)]
    return [(r, q) for r, q in columns if r and r[0].is_floating_point()]


def gate_value(gate: AccuracyConfig, reference: Outputs, quantized: Outputs) -> float:
    """The gate's measure: the lowest output SNR (dB), or the lowest top-1 agreement."""
    columns = float_columns(reference, quantized)
    if gate.top1_agreement is not None:
        return min((top1_agreement(r, q) for r, q in columns), default=1.0)
    return min((snr_db(r, q) for r, q in columns), default=math.inf)


def gate_holds(gate: AccuracyConfig, value: float) -> bool:
    threshold = gate.top1_agreement if gate.top1_agreement is not None else gate.min_snr_db
    return threshold is None or value >= threshold


def db(value: float) -> float | None:
    """An SNR for JSON: rounded to 0.01 dB, None when infinite (exact) or undefined."""
    return None if math.isinf(value) or math.isnan(value) else round(value, 2)
