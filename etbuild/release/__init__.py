"""Releases: a file of products and runtime groups → a verified, reproducible, attested directory.

    result = make_release("releases/example.yaml", dist_root=Path("dist"), jobs=2, cache=open_cache("…"))
    verify_dist(result.dist)                      # hashes, provenance subjects, signature
    print(diff_dists(Path("dist/a-1.0"), Path("dist/a-1.1")))
    check_reproducible(Path("releases/example.yaml"))

`config` loads release files, `assemble` builds and writes a release, `wheel` packs a trimmed
runtime as a wheel, `latency` times a product on its runtime, `provenance` writes the in-toto /
SLSA statement and signs it, `check` verifies, compares and rebuilds releases.
"""

from etbuild.release.assemble import ReleaseResult, make_release
from etbuild.release.check import check_reproducible, diff_dists, verify_dist
from etbuild.release.config import Budget, Product, Release, RuntimeGroup, load_release

__all__ = [
    "Budget",
    "Product",
    "Release",
    "ReleaseResult",
    "RuntimeGroup",
    "check_reproducible",
    "diff_dists",
    "load_release",
    "make_release",
    "verify_dist",
]
