"""A release's bundled programs: products whose recipe has `verify: {bundle: true}` ship their
`.bpte` beside the `.pte`, and the release gate runs every case of it (docs/devtools.md).

The gate runs the bundle in etbuild's runtime with the tolerances the build chose (`verify.json`,
copied beside it), as `etbuild run x.bpte --verify` does; a failing case fails the release
naming the product, the method and the case.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from etbuild.build.layout import Artifacts
from etbuild.devtools.bundle_verify import load_tolerances, verify_bundle
from etbuild.errors import VerificationError
from etbuild.release.config import Release


def copy_bundle(a: Artifacts, folder: Path) -> dict[str, Any]:
    """Copy the product's `.bpte` into its release folder, when it has one; its summary entry."""
    if not a.bpte.exists():
        return {}
    shutil.copyfile(a.bpte, folder / a.bpte.name)
    return {"bpte": f"products/{folder.name}/{a.bpte.name}", "bpte_bytes": a.bpte.stat().st_size}


def gate_bundles(release: Release, out: Path) -> dict[str, int]:
    """Run every shipped bundle's cases; per product, how many passed. VerificationError on a failure."""
    passed = {}
    for p in release.products:
        bpte = out / "products" / p.name / f"{p.name}.bpte"
        if not bpte.exists():
            continue
        results = verify_bundle(bpte, load_tolerances(bpte))
        failed = [f"{r.method} case {r.case} (max abs error {r.max_abs_error:.3g} > {r.bound:.3g})"
                  for r in results if not r.passed]
        if failed:
            raise VerificationError(f"release {release.dist_name}: product {p.name} fails its bundled program: "
                                    f"{', '.join(failed)}")
        passed[p.name] = len(results)
    return passed
