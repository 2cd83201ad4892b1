"""etbuild.release.provenance: the in-toto statement, its dependencies, and DSSE signing."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from etbuild.errors import IntegrityError, UsageError
from etbuild.release import provenance as prov

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def test_a_statement_lists_subjects_sorted_by_name() -> None:
    stmt = prov.statement({"b.txt": "22", "a.txt": "11"}, {"buildDefinition": {}})
    assert stmt == {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "a.txt", "digest": {"sha256": "11"}}, {"name": "b.txt", "digest": {"sha256": "22"}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {"buildDefinition": {}},
    }


def test_git_commit_and_time_of_a_checkout_clean_then_dirty(tmp_path: Path) -> None:
    assert prov.git_commit(tmp_path) is None and prov.commit_time(tmp_path) is None
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*GIT, "-C", str(tmp_path), "add", "f"], check=True)
    env_date = {"GIT_COMMITTER_DATE": "2001-09-09T01:46:40+00:00"}
    subprocess.run([*GIT, "-C", str(tmp_path), "commit", "-qm", "f"], check=True, env={**os.environ, **env_date})
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert prov.git_commit(tmp_path) == {"uri": "git", "digest": {"gitCommit": head.strip()},
                                         "annotations": {"dirty": False}}
    assert prov.commit_time(tmp_path) == 1_000_000_000
    (tmp_path / "f").write_text("2")
    assert prov.git_commit(tmp_path)["annotations"]["dirty"]


def test_tool_dependencies_name_python_and_installed_tools_with_digests() -> None:
    tools = prov.tool_dependencies()
    assert tools[0]["name"] == "python" and tools[0]["uri"].startswith("pkg:generic/python@3.")
    by_name = {t["name"]: t for t in tools[1:]}
    assert {"torch", "numpy"} <= set(by_name)
    assert by_name["numpy"]["uri"].startswith("pkg:pypi/numpy@")
    assert len(by_name["numpy"]["digest"]["sha256"]) == 64


def test_file_dependencies_are_relative_and_unique(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "a.yaml").write_text("a")
    files = [tmp_path / "r" / "a.yaml", tmp_path / "r" / ".." / "r" / "a.yaml"]
    assert prov.file_dependencies(files, tmp_path) == [
        {"name": "r/a.yaml", "digest": {"sha256": "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"}}]


def test_pae_is_dsse_pre_authentication_encoding() -> None:
    assert prov.pae("t/x", b"hello") == b"DSSEv1 3 t/x 5 hello"


def pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def test_sign_and_open_an_envelope() -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    stmt = prov.statement({"a": "1"}, {})
    envelope = prov.sign(stmt, key)
    assert envelope["payloadType"] == prov.PAYLOAD_TYPE
    assert json.loads(base64.b64decode(envelope["payload"])) == stmt
    opened, keyid = prov.open_envelope(envelope, pem(key))
    assert opened == stmt and keyid == prov.key_id(key.public_key()) and len(keyid) == 64
    other_id = prov.key_id(other.public_key())[:16]
    with pytest.raises(IntegrityError, match=f"no signature verifies with the key {other_id}"):
        prov.open_envelope(envelope, pem(other))
    with pytest.raises(UsageError, match="this release is signed: give --key"):
        prov.open_envelope(envelope, None)
    with pytest.raises(IntegrityError, match="payloadType is 'text/plain'"):
        prov.open_envelope({**envelope, "payloadType": "text/plain"}, pem(key))


def test_load_private_key_from_env_or_file_and_its_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (tmp_path / "k.pem").write_bytes(private)
    monkeypatch.setenv("ETBUILD_TEST_KEY", private.decode())
    assert isinstance(prov.load_private_key("file:k.pem", tmp_path), Ed25519PrivateKey)
    assert isinstance(prov.load_private_key("env:ETBUILD_TEST_KEY", tmp_path), Ed25519PrivateKey)
    monkeypatch.delenv("ETBUILD_TEST_KEY")
    with pytest.raises(UsageError, match="^sign.key: environment variable ETBUILD_TEST_KEY is not set$"):
        prov.load_private_key("env:ETBUILD_TEST_KEY", tmp_path)
    (tmp_path / "bad.pem").write_text("not a key")
    with pytest.raises(UsageError, match="^sign.key file:bad.pem: not a PEM private key without a password"):
        prov.load_private_key("file:bad.pem", tmp_path)
    ec = generate_private_key(SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (tmp_path / "ec.pem").write_bytes(ec)
    with pytest.raises(UsageError, match="^sign.key file:ec.pem: expected an Ed25519 key; got "):
        prov.load_private_key("file:ec.pem", tmp_path)
