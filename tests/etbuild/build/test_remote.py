"""Stages on a Dask cluster through an S3-compatible cache: a release built on two workers, then
rebuilt in a fresh build directory with every stage fetched from the same bucket."""

from __future__ import annotations

import io
import json

import pytest

from etbuild.build.remote import executor_for
from etbuild.build.stage_table import STAGES
from etbuild.cache import open_cache
from etbuild.errors import UsageError
from etbuild.release import make_release, verify_dist
from tests.etbuild.release.support import RECIPES, make_project


def test_a_release_on_two_dask_workers_then_a_fresh_tree_from_the_bucket(dask_cluster, s3_bucket, tmp_path):
    release = make_project(tmp_path / "project")
    cache = open_cache(s3_bucket)
    executor = executor_for(dask_cluster.replace("tcp://", "dask://"), cache)
    try:
        first = make_release(release, dist_root=tmp_path / "dist1", build_root=tmp_path / "build1", jobs=3,
                             cache=cache, executor=executor, stream=io.StringIO())
    finally:
        executor.close()
    tasks = sorted(f"{s}:{p}" for s in STAGES if s != "quantize" for p in RECIPES)  # no quantize: section
    assert sorted(first.build.rebuilt) == tasks and set(first.build.cache.values()) == {"miss"}
    again = make_release(release, dist_root=tmp_path / "dist2", build_root=tmp_path / "build2", jobs=2, cache=cache,
                         stream=io.StringIO())
    assert sorted(again.build.executed) == tasks and again.build.rebuilt == []  # 0 stages re-run: all fetched
    assert set(again.build.cache.values()) == {"hit"}
    assert again.sums == first.sums  # the same bytes, from the bucket
    verify_dist(again.dist)
    assert json.loads((again.dist / "products/tiny-c/verify.json").read_text())["passed"] is True


def test_an_executor_needs_a_cache_and_a_dask_address():
    with pytest.raises(UsageError, match="needs --cache"):
        executor_for("dask://127.0.0.1:8786", None)
    with pytest.raises(UsageError, match="expected dask://HOST:PORT"):
        executor_for("ray://x", None)
