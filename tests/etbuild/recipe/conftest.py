"""Fixtures of the etbuild.recipe tests: each test in its own directory; quantize and backends loadable."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run each test in its own directory so that messages show short relative paths."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def supported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load quantize and backends as they will load once their stages exist."""
    monkeypatch.setattr("etbuild.recipe.checks.NOT_SUPPORTED_YET", ())
