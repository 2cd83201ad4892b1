"""A release ships a product's bundled program and its gate runs it (etbuild.release.bundles)."""

from __future__ import annotations

import io
import json

import pytest

from etbuild.devtools import bundle_format as bf
from etbuild.errors import VerificationError
from etbuild.release import make_release
from etbuild.release.bundles import gate_bundles
from etbuild.release.config import load_release
from tests.etbuild.release.support import RECIPES, make_project

RELEASE = """\
name: bundled
version: 1.0.0
products:
  - recipe: ../recipes/tiny-a.yaml
  - recipe: ../recipes/tiny-b.yaml
"""


def test_release_ships_and_gates_the_bundle(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(RECIPES, "tiny-a", RECIPES["tiny-a"].replace("verify: {samples: 2}",
                                                                     "verify: {samples: 2, bundle: true}"))
    path = make_project(tmp_path / "project", RELEASE)
    result = make_release(path, dist_root=tmp_path / "dist", build_root=tmp_path / "build", stream=io.StringIO())
    product = result.dist / "products" / "tiny-a"
    assert (product / "tiny-a.bpte").read_bytes() == (tmp_path / "build/tiny-a/tiny-a.bpte").read_bytes()
    assert not (result.dist / "products" / "tiny-b" / "tiny-b.bpte").exists()
    summary = json.loads((result.dist / "release.json").read_text())
    assert "products/tiny-a/tiny-a.bpte" in (result.dist / "SHA256SUMS").read_text()
    assert json.dumps(summary).count("tiny-a.bpte") >= 1

    bundle = bf.read_bundle((product / "tiny-a.bpte").read_bytes())
    cases = [([bf.value_object(v, "") for v in c.inputs], [bf.value_object(v, "") + 1 for v in c.expected_outputs])
             for c in bundle.method_test_suites[0].test_cases]
    (product / "tiny-a.bpte").write_bytes(bf.write_bundle(bytes(bundle.program), {"forward": cases}))
    with pytest.raises(VerificationError, match=r"product tiny-a fails its bundled program: forward case 0"):
        gate_bundles(load_release(path), result.dist)
