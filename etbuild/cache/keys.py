"""Cache keys: the sha256 of everything a stage's outputs are a function of.

A key is the sha256 of a canonical JSON (sorted keys, no spaces) of: `KEY_SCHEMA`, the stage
name, the digest of etbuild's source and the versions of the tools it runs (`versions()`),
exactly the recipe sections the stage reads, and the sha256 of each file it reads. File paths
inside sections are replaced by their content digests (`portable`), so a key is the same in
every checkout and on every machine, and changes when a file's bytes do.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import etbuild

KEY_SCHEMA = 1
TOOLS = ("torch", "numpy", "flatbuffers", "torchao", "jinja2", "pyyaml")
SOURCE_FOLDERS = ("etbuild", "runtime", "kernels", "backends", "schema")
SOURCE_SUFFIXES = (".py", ".fbs", ".json", ".j2")


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_root() -> Path:
    """The folder holding etbuild's source folders (the checkout, or site-packages' parent of them)."""
    return Path(etbuild.__file__).resolve().parent.parent


def source_files() -> list[Path]:
    """etbuild's own source files, sorted: what `code_digest` covers."""
    root = code_root()
    return sorted(
        path
        for folder in SOURCE_FOLDERS
        for path in (root / folder).rglob("*")
        if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts
    )


def code_digest() -> str:
    """sha256 over etbuild's source files, each as its relative path and bytes."""
    digest = hashlib.sha256()
    root = code_root()
    for path in source_files():
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def tool_versions() -> dict[str, str]:
    """Python's and each tool's version ("absent" when not installed)."""
    versions = {"python": f"{platform.python_implementation()} {platform.python_version()}"}
    for name in TOOLS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def versions() -> dict[str, str]:
    """What every key holds besides the stage's own inputs: etbuild's version and source, the tools'."""
    return {"etbuild": etbuild.__version__, "etbuild_source": code_digest(), **tool_versions()}


def portable(value: Any, files: Mapping[str, str]) -> Any:
    """`value` with each absolute file path of `files` (path -> sha256) replaced by `sha256:<hex>`."""
    if isinstance(value, dict):
        return {k: portable(v, files) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable(v, files) for v in value]
    if isinstance(value, str):
        for path in sorted(files, key=len, reverse=True):
            value = value.replace(path, f"sha256:{files[path]}")
    return value


def stage_key(stage: str, version: Mapping[str, str], fields: Mapping[str, Any], inputs: Mapping[str, str]) -> str:
    """The cache key of one stage run: `fields` already portable, `inputs` relative name -> sha256."""
    material = {"schema": KEY_SCHEMA, "stage": stage, "versions": dict(version), "fields": dict(fields),
                "inputs": dict(inputs)}
    return sha256(canonical(material))
