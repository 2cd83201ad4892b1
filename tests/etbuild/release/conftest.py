"""Fixtures of the etbuild.release tests: a release file with two tiny recipes (loaded, never built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.etbuild.release.support import RECIPES, TWO


@pytest.fixture
def release_file(tmp_path: Path) -> Path:
    """releases/pair.yaml beside recipes/tiny-a.yaml and tiny-b.yaml (no git, nothing built)."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "releases").mkdir()
    for name in ("tiny-a", "tiny-b"):
        (tmp_path / "recipes" / f"{name}.yaml").write_text(RECIPES[name])
    path = tmp_path / "releases" / "pair.yaml"
    path.write_text(TWO)
    return path
