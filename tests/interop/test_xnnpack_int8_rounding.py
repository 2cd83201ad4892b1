"""Int8 XNNPACK nodes round as ExecuTorch's XNNPACK runtime does, bit for bit, where XNNPACK
computes in integers: a global average pool whose input and output share one scale lands on exact
rounding ties (a sum of 4 steps ending in .5), which XNNPACK rounds half to even; summing the float
values instead moves them off the tie. (Found on torchvision's ShuffleNet, whose 2×2 mean rounded
the other way on some samples: our program measured 45.5 dB in our runtime and 44.2 dB in
ExecuTorch's.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.backends.xnnpack.format.blob import read_blob
from etbuild.pipeline import compile_exported
from etbuild.quantize import flow
from etbuild.quantize.modules import SchemeMap
from etbuild.recipe import BackendConfig
from etbuild.runtime import Program
from etbuild.runtime.delegates import processed_blob
from etbuild.verify.oracle import run_samples_in_executorch
from etbuild.verify.stage import run_samples
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]


class PooledHead(torch.nn.Module):
    """conv (stride 2) → ReLU → mean over a 2×2 map → linear: the mean shares the ReLU's scale."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 64, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean([2, 3]))


def _xnnpack_nodes(program: Program) -> set[str]:
    """The node kinds of the program's XNNPACK delegates."""
    nodes = set()
    for delegate in program.plan("forward").delegates:
        blob = processed_blob(program.data, program.program, program.header, delegate.processed, "test")
        nodes |= {type(n.node).__name__ for n in read_blob(blob).graph.xnodes}
    return nodes


def test_int8_global_average_pool_matches_executorch_bit_for_bit(tmp_path: Path) -> None:
    import executorch.kernels.quantized  # noqa: F401  (the quantized kernels the program's boundary calls)

    torch.manual_seed(0)
    model = PooledHead().eval()
    samples = [(torch.randn(1, 8, 4, 4),) for _ in range(64)]
    exported = torch.export.export(model, samples[0])
    converted = flow.quantize(exported, flow.Plan(SchemeMap("int8-static", observer="minmax")), samples[:16])
    compiled = compile_exported({"forward": flow.reexport(converted, samples[0], None)},
                                backends=(BackendConfig("xnnpack"),))
    path = tmp_path / "pooled.pte"
    path.write_bytes(compiled.pte)
    program = Program.load(path)
    assert "GlobalAvgPooling2d" in _xnnpack_nodes(program)
    method = program.load_method("forward")
    ours = [np.asarray(method(s[0].numpy())[0]) for s in samples]
    theirs = [np.asarray(out[0]) for out in run_samples(run_samples_in_executorch, path, samples)]
    for k, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_array_equal(a, b, err_msg=f"sample {k}")
