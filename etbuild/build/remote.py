"""Stages on other machines: a Dask cluster runs them, the shared cache carries their files.

    executor = DaskExecutor("tcp://scheduler:8786", cache)
    build(paths, jobs=8, cache=cache, executor=executor)   # doit threads wait on Dask futures

For a stage whose result the cache lacks, the client stores the build files the stage reads
in the cache (by digest) and submits a `Job` to Dask; a worker fetches those files into a
scratch directory, checks that its etbuild source is the client's and that the source files
the recipe names (model code, weights, allowlists) have the client's digests, runs the stage,
and stores its outputs under the stage's key. The client then restores them from the cache.
Workers therefore need etbuild at the same commit, and the recipes' source files at the same
paths (a shared file system or an identical checkout location); they need no access to the
client's build directory. A stage's own error comes back with its class and message.
"""

from __future__ import annotations

import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etbuild.build.layout import Artifacts
from etbuild.build.stage_table import StageCall, stage_calls
from etbuild.build.stagerun import StageRunner, file_digest
from etbuild.cache import Cache, code_digest, open_cache
from etbuild.errors import EtbuildError, InternalError, UsageError, error_class
from etbuild.extras import require
from etbuild.fsutil import write_bytes
from etbuild.recipe import Recipe


@dataclass(frozen=True)
class Job:
    """One stage to run on a worker: everything it needs, by value or by digest."""

    stage: str
    recipe: Recipe
    key: str
    cache_url: str
    code: str
    inputs: dict[str, str]  # path relative to the recipe's build directory -> sha256 (in the cache)
    sources: dict[str, str]  # absolute source path -> sha256
    client_root: str


def run_job(job: Job) -> dict[str, Any]:
    """Run a Job on this machine (a Dask worker); `{"worker": host}` or `{"error", "exit_code"}`."""
    if code_digest() != job.code:
        return {"error": f"worker {socket.gethostname()} runs etbuild source {code_digest()[:16]}, the client "
                         f"{job.code[:16]}: install the same commit on every worker", "exit_code": 70}
    wrong = {p: d for p, d in job.sources.items() if file_digest(Path(p)) != d}
    if wrong:
        return {"error": f"worker {socket.gethostname()}: source files differ from the client's: "
                         f"{', '.join(sorted(wrong))}", "exit_code": UsageError.exit_code}
    cache = open_cache(job.cache_url)
    with tempfile.TemporaryDirectory(prefix="etbuild-worker-") as tmp:
        call = stage_calls(job.recipe, Artifacts.of(job.recipe, Path(tmp)))[job.stage]
        for rel, digest in job.inputs.items():
            write_bytes(call.root / rel, cache.get_blob(digest))
        try:
            call.run()
        except EtbuildError as exc:
            return {"error": str(exc).replace(str(call.root), job.client_root), "exit_code": exc.exit_code}
        cache.save(job.key, call.stage, call.root, call.outputs)
    return {"worker": socket.gethostname()}


class DaskExecutor:
    """Submits stage jobs to the Dask scheduler at `address` (`tcp://host:port`)."""

    def __init__(self, address: str, cache: Cache) -> None:
        self.address, self.cache = address, cache
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            distributed = require("distributed", "dask")
            self._client = distributed.Client(self.address, timeout=30, set_as_default=False)
        return self._client

    def run(self, call: StageCall, key: str, runner: StageRunner) -> None:
        inputs = {p.relative_to(call.root).as_posix(): self.cache.put_blob(p.read_bytes()) for p in call.reads}
        job = Job(call.stage, call.recipe, key, self.cache.url, runner.versions["etbuild_source"], inputs,
                  runner.source_digests(call), str(call.root))
        result = self.client.submit(run_job, job, key=f"{call.name}-{key[:16]}", pure=False).result()
        if "error" in result:
            raise error_class(result["exit_code"])(result["error"])
        if not isinstance(result.get("worker"), str):
            raise InternalError(f"{call.name}: the worker answered {result!r}")

    def close(self) -> None:
        """Close the connection to the scheduler (the cluster goes on)."""
        if self._client is not None:
            self._client.close()
            self._client = None


def executor_for(spec: str, cache: Cache | None) -> DaskExecutor:
    """The executor `--executor` names: `dask://HOST:PORT` (needs `--cache`)."""
    if not spec.startswith("dask://"):
        raise UsageError(f"--executor {spec!r}: expected dask://HOST:PORT")
    if cache is None:
        raise UsageError("--executor dask://… needs --cache: workers and this machine exchange files through it")
    return DaskExecutor("tcp://" + spec.removeprefix("dask://"), cache)
