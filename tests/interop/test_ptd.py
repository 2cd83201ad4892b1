"""Weights apart from programs, both ways: ExecuTorch's `.pte` + `.ptd` (external constants, XNNPACK weights
tagged external) in our runtime, and ours in ExecuTorch's runtime. Skipped without executorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.pipeline import compile_module
from etbuild.recipe import BackendConfig, WeightsConfig
from etbuild.runtime import Program
from etbuild.runtime.data_files import load_data_file
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x))) * torch.tensor([2.0])


@pytest.fixture(scope="module")
def net() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(3, 8),)


def _theirs(model: torch.nn.Module, inputs: tuple[torch.Tensor], out: Path, xnnpack: bool) -> tuple[Path, Path]:
    """ExecuTorch's build with its weights in `<tag>.ptd` (PTD.md §1 and §3)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower
    from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted

    if xnnpack:
        module = torch.export.export(model, inputs).module()
        delegate_external_constants_pass_unlifted(module=module, gen_tag_fn=lambda node: "model")
        edge = to_edge_transform_and_lower(torch.export.export(module, inputs), partitioner=[XnnpackPartitioner()])
        manager = edge.to_executorch()
    else:
        manager = to_edge(torch.export.export(model, inputs)).to_executorch(
            ExecutorchBackendConfig(external_constants=lambda node: "model"))
    (out / "model.pte").write_bytes(manager.buffer)
    manager.write_tensor_data_to_file(str(out))
    return out / "model.pte", out / "model.ptd"


def _executorch_run(pte: bytes, ptd: bytes, inputs: tuple[torch.Tensor]) -> np.ndarray:
    from executorch.extension.pybindings import _C

    module = _C._load_for_executorch_from_buffer(pte, ptd)
    return module.run_method("forward", inputs)[0].numpy()


@pytest.mark.parametrize("xnnpack", [False, True], ids=["portable", "xnnpack"])
def test_executorch_programs_and_data_run_in_ours(net, tmp_path, xnnpack):
    model, inputs = net
    pte, ptd = _theirs(model, inputs, tmp_path, xnnpack)
    assert ptd.exists() and load_data_file(ptd).entries
    got = Program.load(pte, data=[ptd]).load_method()(inputs[0].numpy())[0]
    want = _executorch_run(pte.read_bytes(), ptd.read_bytes(), inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, model(*inputs).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_executorch_constants_keep_their_names_and_layouts(net, tmp_path):
    model, inputs = net
    _, ptd = _theirs(model, inputs, tmp_path, xnnpack=False)
    entries = load_data_file(ptd).entries
    assert {"a.weight", "a.bias", "b.weight", "b.bias"} <= set(entries)
    assert list(entries["a.weight"].layout.sizes) == [16, 8]


@pytest.mark.parametrize("backends", [(), (BackendConfig("xnnpack", {}),)], ids=["portable", "xnnpack"])
def test_our_programs_and_data_run_in_executorch(net, backends):
    model, inputs = net
    built = compile_module(model, inputs, backends=backends, weights=WeightsConfig("model"))
    want = Program.from_bytes(compile_module(model, inputs, backends=backends).pte).load_method()(inputs[0].numpy())[0]
    got = _executorch_run(built.pte, built.ptd, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
