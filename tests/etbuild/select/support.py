"""Programs shared by the selective-build tests: built once per session.

`mlp`: etbuild.zoo.mlp([16, 32, 4]) (addmm, relu). `tiny`: TinyNet below (addmm, slice,
cat of a tensor list, sigmoid), whose source lines the collected locations point to.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from etbuild.pipeline import compile_module
from etbuild.stages.lower import lower
from etbuild.zoo import mlp

HERE = Path(__file__).resolve().parent


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.cat([y, x[:, :2]], 1).sigmoid()


@dataclass(frozen=True)
class Built:
    """A compiled program: final `.pte` bytes, the unplanned `lowered.unplanned` bytes, its inputs."""

    pte: bytes
    lowered: bytes
    inputs: tuple[torch.Tensor, ...]


@functools.cache
def built(name: str) -> Built:
    torch.manual_seed(0)
    model = (mlp([16, 32, 4]) if name == "mlp" else TinyNet()).eval()
    inputs = (torch.randn(2, 16),)
    lowered = lower({"forward": torch.export.export(model, inputs)})
    return Built(compile_module(model, inputs).pte, lowered.to_bytes(), inputs)


def write_program_files(directory: Path, name: str) -> tuple[Path, Path]:
    """`<name>.pte` and `<name>.lowered.unplanned` written under directory."""
    b = built(name)
    pte, lowered = directory / f"{name}.pte", directory / f"{name}.lowered.unplanned"
    pte.write_bytes(b.pte)
    lowered.write_bytes(b.lowered)
    return pte, lowered


def write_samples(path: Path, name: str, count: int = 2) -> list[np.ndarray]:
    """An `.npz` of `count` samples `s<j>_in0` shaped like the program's input."""
    rng = np.random.default_rng(0)
    shape = built(name).inputs[0].shape
    samples = [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]
    np.savez(path, **{f"s{j}_in0": s for j, s in enumerate(samples)})
    return samples


def write_both(directory: Path) -> Path:
    """Both programs with their samples (`<name>.pte`, `<name>.lowered.unplanned`, `<name>.in.npz`) under directory."""
    for name in ("mlp", "tiny"):
        write_program_files(directory, name)
        write_samples(directory / f"{name}.in.npz", name)
    return directory


def line_of(text: str) -> int:
    """The line number of the first line of this file containing text."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)
