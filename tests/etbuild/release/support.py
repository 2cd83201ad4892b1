"""A small project for release tests: three tiny products, a release file, a git commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

RECIPES = {
    "tiny-a": "name: tiny-a\nmodel:\n  factory: etbuild.zoo:mlp\n  kwargs: {sizes: [12, 24, 6]}\n"
              "  inputs: [{shape: [3, 12], dtype: float32}]\nverify: {samples: 2}\n",
    "tiny-b": "name: tiny-b\nmodel:\n  factory: etbuild.zoo:mlp\n  kwargs: {sizes: [8, 16, 4]}\n"
              "  inputs: [{shape: [2, 8], dtype: float32}]\nverify: {samples: 2}\n",
    "tiny-c": "name: tiny-c\nmodel:\n  factory: etbuild.zoo:kws_cnn\n"
              "  kwargs: {features: 8, channels: [8], num_classes: 3}\n"
              "  inputs: [{shape: [1, 8, 20], dtype: float32}]\nverify: {samples: 2, atol: 1.0e-4}\n",
}
RELEASE = """\
name: small
version: 1.0.0
products:
  - recipe: ../recipes/tiny-a.yaml
    budget: {pte_bytes: 64KiB, runtime_bytes: 200KiB, latency_ms: 1000}
  - recipe: ../recipes/tiny-b.yaml
  - recipe: ../recipes/tiny-c.yaml
runtimes:
  - {name: mlps, products: [tiny-a, tiny-b]}
  - {name: all, products: "*"}
"""
TWO = """\
name: pair
version: 2.0.0
products:
  - recipe: ../recipes/tiny-a.yaml
    budget: {pte_bytes: 2KiB, runtime_bytes: 3000, latency_ms: 1.5}
  - recipe: ../recipes/tiny-b.yaml
"""
"""A release of tiny-a (with a budget) and tiny-b, with no `runtimes:` (one group, `all`)."""


def make_project(root: Path, release: str = RELEASE) -> Path:
    """Write recipes/, releases/small.yaml and commit them; the release file."""
    (root / "recipes").mkdir(parents=True)
    (root / "releases").mkdir()
    for name, text in RECIPES.items():
        (root / "recipes" / f"{name}.yaml").write_text(text)
    path = root / "releases" / "small.yaml"
    path.write_text(release)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "-C", str(root), "add", "."], check=True)
    subprocess.run([*git, "-C", str(root), "commit", "-q", "-m", "recipes"], check=True)
    return path
