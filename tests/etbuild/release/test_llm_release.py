"""A release of a language model: its `.pte` ships with the tokenizer.json its runner reads, and is gated like
any product (verified on its trimmed runtime's wheel, timed, summed)."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from etbuild.release import make_release, verify_dist
from tests.llm_support import TINY, save_checkpoint, train_tokenizer


def _project(root: Path) -> Path:
    (root / "recipes").mkdir(parents=True)
    (root / "releases").mkdir()
    size = train_tokenizer(root / "models" / "tiny-lm")
    save_checkpoint(root / "models" / "tiny-lm", {**TINY, "vocab_size": size})
    recipe = {"name": "tiny-lm", "model": {"llm": {"path": "../models/tiny-lm", "max_context": 32, "max_prefill": 8}},
              "llm": {"attention": "custom"}, "verify": {"tokens": 8}}
    (root / "recipes" / "tiny-lm.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    release = root / "releases" / "lm.yaml"
    release.write_text("name: lm\nversion: 1.0.0\nproducts:\n  - recipe: ../recipes/tiny-lm.yaml\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "-C", str(root), "add", "."], check=True)
    subprocess.run([*git, "-C", str(root), "commit", "-q", "-m", "lm"], check=True)
    return release


@pytest.mark.slow  # a release builds, verifies on the wheel and times: about four minutes on two busy cores
def test_a_language_model_ships_with_its_tokenizer(tmp_path):
    release = _project(tmp_path)
    dist = make_release(release, dist_root=tmp_path / "dist", build_root=tmp_path / "build",
                        stream=io.StringIO()).dist
    product = dist / "products" / "tiny-lm"
    assert (product / "tokenizer.json").read_bytes() == (tmp_path / "models/tiny-lm/tokenizer.json").read_bytes()
    summary = json.loads((dist / "release.json").read_text())["products"]["tiny-lm"]
    assert summary["tokenizer"] == "products/tiny-lm/tokenizer.json"
    assert "products/tiny-lm/tokenizer.json" in (dist / "SHA256SUMS").read_text()
    verify_dist(dist)
