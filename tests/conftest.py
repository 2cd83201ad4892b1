"""Shared fixtures: small models compiled by etbuild and, when installed, by ExecuTorch."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
from collections.abc import Iterator
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


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """An S3-compatible server (moto) on a free loopback port, once per session; dummy credentials."""
    pytest.importorskip("moto.server", reason="moto[server] (the test extra) is not installed")
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A fresh bucket for one test, as a cache URL `s3://<bucket>/cache?endpoint=…`."""
    import boto3

    name = "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:20]
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/cache?endpoint={s3_endpoint}"


@pytest.fixture(scope="session")
def dask_cluster(s3_endpoint: str) -> Iterator[str]:
    """A 2-worker Dask cluster of processes, once per session (after the S3 credentials are set,
    which its workers inherit); its scheduler's address."""
    distributed = pytest.importorskip("distributed", reason="dask[distributed] (the dask extra) is not installed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    yield cluster.scheduler_address
    cluster.close()
