"""Provenance of a release: an in-toto Statement v1 with an SLSA Provenance v1 predicate, and
its DSSE envelope signed with Ed25519.

- subjects: every file `SHA256SUMS` lists, by its path in the release and sha256;
- `buildDefinition`: `externalParameters` (the release file, name, version, products and
  runtimes as chosen), `internalParameters` (the hash seed, SOURCE_DATE_EPOCH, each stage's
  cache key), `resolvedDependencies` (the git commit, every source file a product reads —
  recipes and what they extend, model sources, weights, allowlists, calibration data — and
  the tool versions, each installed tool identified by the sha256 of its RECORD);
- `runDetails`: the builder and its versions, the invocation's id and times, byproducts
  (measurements.json, by digest).

Signing uses DSSE: the signature covers the pre-authentication encoding
`DSSEv1 SP len(type) SP type SP len(body) SP body`; `keyid` is the sha256 of the raw public key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from etbuild.errors import IntegrityError, UsageError
from etbuild.extras import require

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:etbuild:release:v1"
BUILDER_ID = "urn:etbuild:builder:etbuild-release"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
TOOLS = ("etbuild", "torch", "numpy", "flatbuffers", "torchao", "doit", "jinja2", "pyyaml")


def statement(subjects: Mapping[str, str], predicate: dict[str, Any]) -> dict[str, Any]:
    """The in-toto Statement of `subjects` (path -> sha256) with an SLSA Provenance predicate."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in sorted(subjects.items())],
        "predicateType": SLSA_PROVENANCE,
        "predicate": predicate,
    }


def git_commit(where: Path) -> dict[str, Any] | None:
    """The git checkout holding `where`: its commit, whether it has changes, its remote (or None)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return None
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    remote = subprocess.run(["git", "remote", "get-url", "origin"], cwd=where, capture_output=True, text=True,
                            check=False).stdout.strip()
    return {"uri": remote or "git", "digest": {"gitCommit": commit}, "annotations": {"dirty": dirty}}


def commit_time(where: Path) -> int | None:
    """Seconds since the epoch of the commit checked out at `where`, or None outside git."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=where, capture_output=True, text=True,
                             check=True).stdout.strip()
        return int(out) if out else None
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None


def tool_dependencies() -> list[dict[str, Any]]:
    """Python and each installed tool as resource descriptors (a tool by its RECORD's sha256)."""
    import platform

    out: list[dict[str, Any]] = [{"uri": f"pkg:generic/python@{platform.python_version()}", "name": "python"}]
    for name in TOOLS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        record = dist.read_text("RECORD") or ""
        entry: dict[str, Any] = {"uri": f"pkg:pypi/{name}@{dist.version}", "name": name}
        if record:
            entry["digest"] = {"sha256": hashlib.sha256(record.encode()).hexdigest()}
        out.append(entry)
    return out


def file_dependencies(files: Sequence[Path], root: Path) -> list[dict[str, Any]]:
    """Source files as resource descriptors named by their path relative to `root`."""
    from etbuild.fsutil import sha256_file

    unique = sorted({f.resolve() for f in files})
    return [{"name": os.path.relpath(f, root), "digest": {"sha256": sha256_file(f)}} for f in unique]


# ---------------------------------------------------------------------------- DSSE


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def load_private_key(spec: str, base: Path) -> Any:
    """The Ed25519 private key `env:VAR` or `file:PATH` (relative to `base`) names, from PEM."""
    serialization = require("cryptography.hazmat.primitives.serialization", "sign")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    kind, _, where = spec.partition(":")
    if kind == "env":
        if where not in os.environ:
            raise UsageError(f"sign.key: environment variable {where} is not set")
        pem = os.environ[where].encode()
    else:
        pem = (base / where).read_bytes()
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"sign.key {spec}: not a PEM private key without a password ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"sign.key {spec}: expected an Ed25519 key; got {type(key).__name__}")
    return key


def key_id(public_key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def sign(stmt: dict[str, Any], private_key: Any) -> dict[str, Any]:
    """The DSSE envelope of the statement, signed with the Ed25519 key."""
    body = json.dumps(stmt, sort_keys=True, indent=2).encode()
    signature = private_key.sign(pae(PAYLOAD_TYPE, body))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(body).decode(),
        "signatures": [{"keyid": key_id(private_key.public_key()), "sig": base64.b64encode(signature).decode()}],
    }


def open_envelope(envelope: dict[str, Any], public_key_pem: bytes | None) -> tuple[dict[str, Any], str]:
    """The statement in a DSSE envelope and the keyid that signed it; IntegrityError when no
    signature verifies with the public key (or no key is given)."""
    serialization = require("cryptography.hazmat.primitives.serialization", "sign")
    from cryptography.exceptions import InvalidSignature

    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise IntegrityError(f"provenance.json: payloadType is {envelope.get('payloadType')!r}, not {PAYLOAD_TYPE}")
    body = base64.b64decode(envelope["payload"])
    if public_key_pem is None:
        raise UsageError("this release is signed: give --key PUBLIC_KEY.pem to check its signature")
    public_key = serialization.load_pem_public_key(public_key_pem)
    for sig in envelope.get("signatures", []):
        try:
            public_key.verify(base64.b64decode(sig["sig"]), pae(PAYLOAD_TYPE, body))
            return json.loads(body), sig.get("keyid", "")
        except InvalidSignature:
            continue
    raise IntegrityError(f"provenance.json: no signature verifies with the key {key_id(public_key)[:16]}")
