"""Shared fixtures: small models compiled by etbuild and, when installed, by ExecuTorch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from etbuild.pipeline import compile_module
from etbuild.zoo import mlp

HAS_EXECUTORCH = importlib.util.find_spec("executorch") is not None
requires_executorch = pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch (the interop oracle) is not installed")


@pytest.fixture(scope="session")
def small_mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return mlp([16, 32, 8, 4]).eval(), (torch.randn(2, 16),)


@pytest.fixture(scope="session")
def small_mlp_pte(small_mlp, tmp_path_factory) -> Path:
    model, inputs = small_mlp
    path = tmp_path_factory.mktemp("ours") / "small_mlp.pte"
    path.write_bytes(compile_module(model, inputs).pte)
    return path


def executorch_pte(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path) -> Path:
    """The model compiled by ExecuTorch's own export → to_edge → to_executorch."""
    from executorch.exir import to_edge

    program = to_edge(torch.export.export(model, inputs)).to_executorch()
    path.write_bytes(program.buffer)
    return path


@pytest.fixture(scope="session")
def executorch_small_mlp_pte(small_mlp, tmp_path_factory) -> Path:
    if not HAS_EXECUTORCH:
        pytest.skip("executorch (the interop oracle) is not installed")
    model, inputs = small_mlp
    return executorch_pte(model, inputs, tmp_path_factory.mktemp("theirs") / "small_mlp.pte")
