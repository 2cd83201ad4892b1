"""etbuild.release.assemble: the pieces around a release build (checkout root, dates, sums, budgets)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from etbuild.errors import ReleaseError
from etbuild.release.assemble import (
    UNSUMMED,
    BuiltRuntime,
    checkout_root,
    source_date_epoch,
    wheel_path,
    write_sums,
)
from etbuild.release.budgets import check_budgets
from etbuild.release.config import load_release


def test_checkout_root_is_the_checkout_else_the_release_folder(tmp_path: Path) -> None:
    (tmp_path / "releases").mkdir()
    release = tmp_path / "releases" / "r.yaml"
    assert checkout_root(release) == tmp_path / "releases"
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert checkout_root(release) == tmp_path.resolve()


def test_source_date_epoch_from_the_environment_else_1980(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234")
    assert source_date_epoch(tmp_path) == 1234
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "soon")  # not a number: ignored
    assert source_date_epoch(tmp_path) == 315532800  # no git checkout either


def test_write_sums_leaves_out_the_files_that_describe_the_sums(tmp_path: Path) -> None:
    for name in (*UNSUMMED, "b", "a/c"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name)
    sums = write_sums(tmp_path)
    assert list(sums) == ["a/c", "b"]
    assert (tmp_path / "SHA256SUMS").read_text() == "".join(f"{d}  {n}\n" for n, d in sums.items())


def built(release, name: str, runtime_bytes: int) -> BuiltRuntime:
    group = next(g for g in release.runtimes if g.name == name)
    return BuiltRuntime(group, f"pair_{name}-2.0.0-py3-none-any.whl", b"", runtime_bytes, (), "")


def test_budgets_name_every_product_budget_and_figure_over_its_limit(release_file: Path, tmp_path: Path) -> None:
    release = load_release(release_file)
    out = tmp_path / "dist"
    for name, size in (("tiny-a", 4096), ("tiny-b", 10**6)):
        (out / "products" / name).mkdir(parents=True)
        (out / "products" / name / f"{name}.pte").write_bytes(bytes(size))
    latency = {p: {"all": {"median_ms": 2.0}} for p in ("tiny-a", "tiny-b")}
    with pytest.raises(ReleaseError) as err:
        check_budgets(release, out, {"all": 3001}, latency)
    assert str(err.value) == (
        "release pair-2.0.0: over budget: product tiny-a: pte_bytes 4,096 > budget 2,048; "
        "product tiny-a: runtime_bytes of runtime all 3,001 > budget 3,000; "
        "product tiny-a: latency_ms on runtime all 2.000 > budget 1.5")
    (out / "products" / "tiny-a" / "tiny-a.pte").write_bytes(bytes(2048))
    latency["tiny-a"]["all"]["median_ms"] = 1.5
    check_budgets(release, out, {"all": 3000}, latency)  # at the limit: within


def test_a_wheel_lives_under_runtimes(release_file: Path, tmp_path: Path) -> None:
    rt = built(load_release(release_file), "all", 1)
    assert wheel_path(tmp_path, rt) == tmp_path / "runtimes" / "all" / "pair_all-2.0.0-py3-none-any.whl"
