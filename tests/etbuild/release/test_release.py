"""`etbuild release`: release files, the release directory, verification, signing, diff, budgets."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from etbuild.cli import main
from etbuild.errors import IntegrityError, RecipeError, ReleaseError
from etbuild.release import diff_dists, load_release, make_release, verify_dist
from etbuild.verify.trimmed import run_trimmed

from .support import RELEASE, make_project


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="module")
def released(project):
    root = project.parent.parent
    return make_release(project, dist_root=root / "dist", build_root=root / "build", stream=io.StringIO())


def _release_file(project: Path, text: str, name: str = "other.yaml") -> Path:
    path = project.parent / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("edit, message", [
    (("    budget:", "    budgte:"), "{f}:5:5: products[0].budgte: unknown key 'budgte' — did you mean 'budget'?"),
    (("[tiny-a, tiny-b]", "[tiny-a, tiny-d]"), "{f}:9:37: runtimes[0].products[1]: no product 'tiny-d' — did you "
                                               "mean 'tiny-c'?"),
    (("[tiny-a, tiny-b]", "[tiny-a, mlp]"), "{f}:9:37: runtimes[0].products[1]: no product 'mlp'; the products are "
                                            "tiny-a, tiny-b, tiny-c"),
    (("../recipes/tiny-b.yaml", "../recipes/absent.yaml"),
     "{f}:6:5: products[1].recipe: expected an existing recipe file; got '../recipes/absent.yaml' "
     "({d}/../recipes/absent.yaml not found)"),
    (('  - {name: all, products: "*"}\n', ""),
     "{f}:8:1: runtimes: products tiny-c ship with no runtime; add them to a group"),
    (("pte_bytes: 64KiB", "pte_bytes: 64kB"), "{f}:5:25: products[0].budget.pte_bytes: expected a size such as 300KiB "
                                              "or 307200; got '64kB'"),
])
def test_release_file_errors_name_the_place(project, edit, message):
    path = _release_file(project, RELEASE.replace(*edit))
    with pytest.raises(RecipeError) as err:
        load_release(path)
    assert str(err.value) == message.format(f=path, d=path.parent)


def test_a_release_directory_holds_products_wheels_and_sums(released):
    dist = released.dist
    assert dist.name == "small-1.0.0"
    summary = json.loads((dist / "release.json").read_text())
    assert sorted(summary["products"]) == ["tiny-a", "tiny-b", "tiny-c"]
    assert summary["products"]["tiny-a"]["runtimes"] == ["mlps", "all"]
    assert summary["runtimes"]["mlps"]["products"] == ["tiny-a", "tiny-b"]
    assert "aten::convolution.out" in summary["runtimes"]["all"]["operators"]
    assert "aten::convolution.out" not in summary["runtimes"]["mlps"]["operators"]
    sums = (dist / "SHA256SUMS").read_text().splitlines()
    assert [line.split("  ")[1] for line in sums] == sorted(released.sums)
    assert "runtimes/mlps/etbuild_runtime_small_mlps-1.0.0-py3-none-any.whl" in released.sums
    yaml_text = (dist / "runtimes/all/selected_operators.yaml").read_text()
    assert "aten::convolution.out:" in yaml_text and "et_kernel_metadata:" in yaml_text
    for product in ("tiny-a", "tiny-b", "tiny-c"):
        assert json.loads((dist / f"products/{product}/verify-all.json").read_text())["passed"] is True
    latency = json.loads((dist / "measurements.json").read_text())["latency"]
    assert latency["tiny-a"]["mlps"]["median_ms"] > 0
    expected = f"{len(released.sums)} files match SHA256SUMS and provenance.json; provenance not signed"
    assert verify_dist(dist) == expected


def test_provenance_is_an_in_toto_statement_with_slsa_provenance(released, project):
    pytest.importorskip("in_toto_attestation", reason="in-toto-attestation (the test extra) is not installed")
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    stmt = json.loads((released.dist / "provenance.json").read_text())
    Statement.copy_from_pb(json_format.ParseDict(stmt, Statement([], "", {}).pb)).validate()
    predicate = json_format.ParseDict(stmt["predicate"], provenance_pb2.Provenance())
    for dep in predicate.build_definition.resolved_dependencies:
        ResourceDescriptor.copy_from_pb(dep).validate()
    assert {s["name"]: s["digest"]["sha256"] for s in stmt["subject"]} == released.sums
    deps = {d.get("name") or d.get("uri"): d for d in stmt["predicate"]["buildDefinition"]["resolvedDependencies"]}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project.parent, capture_output=True, text=True).stdout
    assert any(d.get("digest", {}).get("gitCommit") == commit.strip() for d in deps.values())
    assert {"recipes/tiny-a.yaml", "recipes/tiny-c.yaml", "releases/small.yaml", "torch", "numpy"} <= set(deps)
    internal = stmt["predicate"]["buildDefinition"]["internalParameters"]
    assert set(internal["stage_keys"]) >= {"export:tiny-a", "verify:tiny-c"}
    assert not any(str(project.parent) in json.dumps(v) for v in (stmt["subject"], internal))  # no checkout paths


def test_verify_fails_on_a_flipped_byte(released, tmp_path, capsys):
    copy = tmp_path / released.dist.name
    shutil.copytree(released.dist, copy)
    pte = copy / "products/tiny-b/tiny-b.pte"
    data = bytearray(pte.read_bytes())
    data[len(data) // 2] ^= 0x01
    pte.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=r"products/tiny-b/tiny-b.pte has sha256 [0-9a-f]{64}; SHA256SUMS says"):
        verify_dist(copy)
    assert main(["release", "verify", str(copy)]) == 9
    assert "tiny-b.pte has sha256" in capsys.readouterr().err


def test_a_signed_release_verifies_with_its_key_only(project, released, tmp_path, monkeypatch):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    def pem_pair(name: str) -> tuple[bytes, Path]:
        key = Ed25519PrivateKey.generate()
        public = tmp_path / f"{name}.pub.pem"
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return private, public

    private, public = pem_pair("signer")
    _, stranger = pem_pair("stranger")
    monkeypatch.setenv("ETBUILD_TEST_SIGNING_KEY", private.decode())
    path = _release_file(project, RELEASE + "sign: {key: env:ETBUILD_TEST_SIGNING_KEY}\n", "signed.yaml")
    root = project.parent.parent
    signed = make_release(path, dist_root=tmp_path / "dist", build_root=root / "build", stream=io.StringIO())
    envelope = json.loads((signed.dist / "provenance.json").read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json" and len(envelope["signatures"]) == 1
    assert "signature by key" in verify_dist(signed.dist, public)
    with pytest.raises(IntegrityError, match="no signature verifies with the key"):
        verify_dist(signed.dist, stranger)
    assert main(["release", "verify", str(signed.dist)]) == 2  # signed: the key must be given
    assert signed.sums == released.sums  # signing changes no shipped byte


def test_a_runtime_wheel_installs_with_pip_and_runs_a_product(released, tmp_path):
    wheel = released.dist / "runtimes/all/etbuild_runtime_small_all-1.0.0-py3-none-any.whl"
    target = tmp_path / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (target / "etbuild/kernels/selected.py").exists()
    assert list(target.glob("etbuild_runtime_small_all-1.0.0.dist-info/RECORD"))
    x = np.random.default_rng(0).standard_normal((1, 8, 20)).astype(np.float32)
    np.savez(tmp_path / "in.npz", s0_in0=x)
    run_trimmed(target, released.dist / "products/tiny-c/tiny-c.pte", tmp_path / "in.npz", tmp_path / "out.npz")
    with np.load(tmp_path / "out.npz") as out:
        assert out["s0_out0"].shape == (1, 3) and np.isfinite(out["s0_out0"]).all()


def test_a_budget_overrun_names_product_budget_and_figure(project, tmp_path):
    path = _release_file(project, RELEASE.replace("pte_bytes: 64KiB", "pte_bytes: 1KiB"), "tight.yaml")
    root = project.parent.parent
    with pytest.raises(ReleaseError, match=r"^release small-1.0.0: over budget: product tiny-a: pte_bytes [0-9,]+ > "
                                           r"budget 1,024$"):
        make_release(path, dist_root=tmp_path / "dist", build_root=root / "build", stream=io.StringIO())
    assert not (tmp_path / "dist" / "small-1.0.0").exists()


def test_diff_shows_what_a_release_changes(project, released, tmp_path):
    changed = (project.parent / "v2").resolve()
    (changed / "recipes").mkdir(parents=True)
    for recipe in (project.parent.parent / "recipes").iterdir():
        shutil.copy(recipe, changed / "recipes" / recipe.name)
    (changed / "recipes" / "tiny-b.yaml").write_text(
        (changed / "recipes" / "tiny-b.yaml").read_text().replace("[8, 16, 4]", "[8, 32, 4]"))
    (changed / "releases").mkdir()
    path = changed / "releases" / "small.yaml"
    path.write_text(RELEASE.replace("1.0.0", "1.1.0"))
    root = project.parent.parent
    v2 = make_release(path, dist_root=tmp_path / "dist", build_root=root / "build", stream=io.StringIO())
    text = diff_dists(released.dist, v2.dist)
    assert text.startswith("small 1.0.0 → small 1.1.0\n")
    block = text.split("tiny-b:\n")[1].split("tiny-c:")[0]
    assert "  pte bytes      " in block and "(+" in block.splitlines()[0]
    assert "  operators      +0 -0" in block
    assert text.split("tiny-a:\n")[1].splitlines()[0].endswith("(+0.0%)")


@pytest.mark.slow  # two whole releases in subprocesses: about a minute and a half here
def test_check_reproducible_builds_twice_and_finds_identical_bytes(project, tmp_path, capsys):
    assert main(["release", str(project), "--check-reproducible", "--dist-dir", str(tmp_path / "dist")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("reproducible: two builds in clean directories gave identical bytes for all ")
    assert verify_dist(tmp_path / "dist" / "small-1.0.0").endswith("provenance not signed")
