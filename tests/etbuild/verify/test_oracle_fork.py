"""ExecuTorch's runtime in a fork of the build process: the same outputs as in a fresh one, errors as errors."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.errors import VerificationError
from etbuild.pipeline import compile_module
from etbuild.recipe import BackendConfig
from etbuild.verify import oracle_fork
from etbuild.verify.oracle import run_samples_in_executorch
from etbuild.verify.stage import run_samples
from tests.conftest import requires_executorch

pytestmark = requires_executorch


class ConvHead(torch.nn.Module):
    """A convolution the XNNPACK delegate takes and a log_softmax it leaves to the portable kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.conv(x).flatten(1), dim=1)


Delegated = tuple[Path, list[tuple[torch.Tensor, ...]], torch.nn.Module]


@pytest.fixture(scope="module")
def delegated(tmp_path_factory: pytest.TempPathFactory) -> Delegated:
    torch.manual_seed(0)
    model = ConvHead().eval()
    pte = tmp_path_factory.mktemp("fork") / "conv.pte"
    pte.write_bytes(compile_module(model, (torch.randn(1, 3, 8, 8),), backends=(BackendConfig("xnnpack", {}),)).pte)
    return pte, [(torch.randn(1, 3, 8, 8),) for _ in range(3)], model


def test_a_fork_gives_the_outputs_a_fresh_process_gives(delegated):
    pte, samples, model = delegated
    forked = run_samples(oracle_fork.run, pte, samples)
    fresh = run_samples(run_samples_in_executorch, pte, samples)
    for (x,), ours, theirs in zip(samples, forked, fresh, strict=True):
        assert len(ours) == len(theirs) == 1
        np.testing.assert_array_equal(ours[0], theirs[0])
        with torch.no_grad():
            np.testing.assert_allclose(ours[0], model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_a_program_that_fails_in_the_fork_is_a_verification_error(tmp_path, delegated):
    pte, samples, _ = delegated
    broken = tmp_path / "broken.pte"
    broken.write_bytes(pte.read_bytes()[: len(pte.read_bytes()) // 2])
    with pytest.raises(VerificationError, match=r"broken\.pte failed in ExecuTorch's runtime \(exit 1\)"):
        run_samples(oracle_fork.run, broken, samples)


def test_a_fork_only_from_a_process_without_other_threads(delegated):
    pte, _, _ = delegated
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not oracle_fork.usable(pte)
    finally:
        stop.set()
        other.join()
    # a fresh process (this one may hold threads other tests left: a Dask cluster, an S3 server)
    code = "import sys; from pathlib import Path; from etbuild.verify import oracle_fork; " \
           "print(oracle_fork.usable(Path(sys.argv[1])))"
    done = subprocess.run([sys.executable, "-c", code, str(pte)], capture_output=True, text=True, check=True)
    assert done.stdout.split()[-1] == "True"
