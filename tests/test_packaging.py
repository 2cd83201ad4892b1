"""Packaging: pyproject.toml maps the top-level folders under `etbuild`, and drops none of them.

`[tool.setuptools] packages` lists every package by hand (setuptools cannot discover packages
under a renamed folder), so a folder with an `__init__.py` that the list leaves out would be
missing from wheels while an editable install still imports it. These tests name any such
folder, build the wheel, check that it holds exactly the source files of the mapped folders,
and run a program with the unpacked wheel as the only etbuild on the path.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from etbuild.verify.trimmed import run_trimmed

ROOT = Path(__file__).resolve().parents[1]
NEVER_PACKAGED = {"tests", "build", "dist"}  # top-level folders that hold packages we do not ship


@functools.cache
def setuptools_config() -> dict[str, Any]:
    """pyproject.toml's [tool.setuptools] table."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def package_of(folder: Path) -> str | None:
    """The import name a repository folder installs as, by the longest mapped folder above it."""
    mapped = {Path(d): p for p, d in setuptools_config()["package-dir"].items()}
    for above in (folder, *folder.parents):
        if above in mapped:
            return ".".join([mapped[above], *folder.relative_to(above).parts])
    return None


def walked(parent: Path, name: str) -> bool:
    """Whether the walk for packages enters folder `name` under `parent` (relative to the repository)."""
    hidden = name.startswith(".") or name == "__pycache__" or name.endswith(".egg-info")
    return not hidden and not (parent == Path() and name in NEVER_PACKAGED)


def folders_with_init() -> list[Path]:
    """Every folder of the repository (relative) holding an `__init__.py`, build output and tests left out."""
    found = []
    for top, dirs, files in os.walk(ROOT):
        rel = Path(top).relative_to(ROOT)
        dirs[:] = [d for d in dirs if walked(rel, d)]
        if "__init__.py" in files:
            found.append(rel)
    return sorted(found)


def test_every_folder_with_an_init_is_packaged() -> None:
    listed = set(setuptools_config()["packages"])
    found = {folder: package_of(folder) for folder in folders_with_init()}
    left_out = [f"{f} ({name or 'under no mapped folder'})" for f, name in found.items() if name not in listed]
    assert not left_out, f"add to pyproject.toml [tool.setuptools] packages (or package-dir): {', '.join(left_out)}"
    assert sorted(listed - set(found.values())) == [], "listed packages with no folder"


def wheel_paths() -> set[str]:
    """Where each file of the mapped folders lands in a wheel: `runtime/x.py` -> `etbuild/runtime/x.py`."""
    paths = set()
    for folder in setuptools_config()["package-dir"].values():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                package = package_of(path.parent.relative_to(ROOT))
                paths.add(f"{package.replace('.', '/')}/{path.name}")
    return paths


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of the sources.

    A copy, because setuptools builds in `build/lib` beside pyproject.toml and keeps what an
    earlier build left there (a deleted module would ship again), and `build/` is etbuild's.
    """
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in set(setuptools_config()["package-dir"].values()):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("etbuild-*.whl")
    return path


def test_the_wheel_holds_exactly_the_mapped_folders(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n for n in whl.namelist() if not n.split("/")[0].endswith(".dist-info")}
    want = wheel_paths()
    assert sorted(want - shipped) == [], "files the wheel leaves out"
    assert sorted(shipped - want) == [], "files the wheel holds that no mapped folder has"
    assert {"etbuild/schema/program.fbs", "etbuild/select/templates/module.py.j2"} <= shipped


def test_the_unpacked_wheel_alone_runs_a_program(wheel: Path, tmp_path: Path, small_mlp, small_mlp_pte: Path) -> None:
    """etbuild.runtime from the wheel, with only numpy and flatbuffers beside it, runs a .pte."""
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(tmp_path / "site")
    model, (x,) = small_mlp
    np.savez(tmp_path / "in.npz", s0_in0=x.numpy())
    run_trimmed(tmp_path / "site", small_mlp_pte, tmp_path / "in.npz", tmp_path / "out.npz")
    with np.load(tmp_path / "out.npz") as out, torch.no_grad():
        np.testing.assert_allclose(out["s0_out0"], model(x).numpy(), rtol=1e-5, atol=1e-6)
