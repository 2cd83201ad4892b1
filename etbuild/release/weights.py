"""Weights in a release: each `.ptd` shipped once, however many products use it.

Products whose recipes name one weights file (`emit.weights: {file: base}`) share
`weights/base.ptd`: the union of their entries (a key two of them hold with different values
already failed the build, etbuild.build.shared_weights), written by the same deterministic
writer, so it is byte-identical to each product's own file when they hold the same keys. A
product's download is its `.pte` plus the weights files it uses; an update downloads only the
files whose digest changed (`release diff`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etbuild.build.layout import Artifacts
from etbuild.fsutil import write_bytes
from etbuild.release.config import Product, Release
from etbuild.runtime.data_files import load_data_file
from etbuild.runtime.format.ptd import write_ptd

FOLDER = "weights"


def weights_path(p: Product) -> str | None:
    """Where the product's weights file lives in a release (relative), or None when its weights are inside."""
    weights = p.recipe.emit.weights
    return f"{FOLDER}/{weights.file}.ptd" if weights else None


def write_weights(release: Release, build_root: Path, out: Path) -> dict[str, dict[str, Any]]:
    """Write each weights file once under `out/weights/`; per file, its size and the products that use it."""
    users: dict[str, list[Product]] = {}
    for p in release.products:
        rel = weights_path(p)
        if rel is not None:
            users.setdefault(rel, []).append(p)
    summary = {}
    for rel, products in sorted(users.items()):
        entries: dict[str, tuple[bytes, Any]] = {}
        for p in products:
            built = Artifacts.of(p.recipe, build_root).data_files(p.recipe)[0]
            for key, entry in load_data_file(built).entries.items():
                entries.setdefault(key, (bytes(entry.data), entry.layout))
        write_bytes(out / rel, write_ptd(entries))
        summary[rel] = {"bytes": (out / rel).stat().st_size, "keys": len(entries),
                        "products": [p.name for p in products]}
    return summary


def product_files(out: Path, p: Product) -> list[Path]:
    """The files a device downloads for the product: its `.pte` and its weights file."""
    rel = weights_path(p)
    return [out / "products" / p.name / f"{p.name}.pte", *([out / rel] if rel else [])]


def data_files(out: Path, p: Product) -> list[Path]:
    """The product's weights file in the release (none when its weights are inside, or when it holds no key:
    ExecuTorch's runtime refuses an empty one)."""
    rel = weights_path(p)
    return [out / rel] if rel and load_data_file(out / rel).entries else []


def update_summary(before: dict[str, Any], after: dict[str, Any], sums_a: dict[str, str],
                   sums_b: dict[str, str]) -> list[str]:
    """`release diff`'s lines on what a device downloads to update one product (both releases' entries)."""
    files = [after["pte"], *([after["weights"]] if after.get("weights") else [])]
    changed = [f for f in files if sums_a.get(f) != sums_b.get(f)]
    program = "program changed" if after["pte"] in changed else "program unchanged"
    weights = after.get("weights")
    if weights is None:
        state = "weights inside the program"
    else:
        state = "weights changed" if weights in changed else "weights unchanged"
    sizes = after.get("download", {})
    download = sum(sizes.get(f, 0) for f in changed)
    full = sum(sizes.get(f, 0) for f in files)
    return [f"  update         {program}, {state}: a device downloads {download:,} of {full:,} bytes"]
