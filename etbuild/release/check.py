"""Checking releases: `release verify DIR`, `release diff A B`, `--check-reproducible`.

- `verify_dist`: every file SHA256SUMS lists has that digest, no other file is there (but the
  provenance and measurements), provenance subjects are exactly SHA256SUMS, the measurements
  match their digest in the provenance, and a signed provenance verifies with the given key.
- `diff_dists`: per product, the change in `.pte` bytes, runtime bytes, latency, accuracy and
  operators between two release directories.
- `check_reproducible`: two builds at once, in fresh directories with no cache and with
  different hash seeds, compared file by file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from etbuild.errors import IntegrityError, ReleaseError
from etbuild.fsutil import sha256_file
from etbuild.release import provenance as prov
from etbuild.release.assemble import UNSUMMED
from etbuild.release.weights import update_summary

HASH_SEEDS = ("0", "1")


def read_sums(folder: Path) -> dict[str, str]:
    """SHA256SUMS of a release directory: path -> sha256."""
    sums_file = folder / "SHA256SUMS"
    if not sums_file.is_file():
        raise IntegrityError(f"{folder}: no SHA256SUMS; not a release directory")
    sums = {}
    for lineno, line in enumerate(sums_file.read_text().splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise IntegrityError(f"{sums_file}:{lineno}: expected '<sha256>  <path>'; got {line!r}")
        sums[name] = digest
    return sums


def verify_dist(folder: Path, public_key: Path | None = None) -> str:
    """Check a release directory (see the module docstring); a one-line summary, or IntegrityError."""
    sums = read_sums(folder)
    for name, digest in sums.items():
        path = folder / name
        if not path.is_file():
            raise IntegrityError(f"{folder}: {name} is listed in SHA256SUMS but missing")
        if sha256_file(path) != digest:
            raise IntegrityError(f"{folder}: {name} has sha256 {sha256_file(path)}; SHA256SUMS says {digest}")
    extra = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
                   and p.relative_to(folder).as_posix() not in (*sums, *UNSUMMED))
    if extra:
        raise IntegrityError(f"{folder}: files not in SHA256SUMS: {', '.join(extra)}")
    stmt, signer = _statement(folder, public_key)
    subjects = {s["name"]: s["digest"]["sha256"] for s in stmt["subject"]}
    if subjects != sums:
        differ = sorted(set(subjects.items()) ^ set(sums.items()))
        raise IntegrityError(f"{folder}: provenance subjects differ from SHA256SUMS at {differ[0][0]}")
    for item in stmt["predicate"]["runDetails"].get("byproducts", []):
        if sha256_file(folder / item["name"]) != item["digest"]["sha256"]:
            raise IntegrityError(f"{folder}: {item['name']} does not match its digest in provenance.json")
    signed = f"; signature by key {signer[:16]} verified" if signer else "; provenance not signed"
    return f"{len(sums)} files match SHA256SUMS and provenance.json{signed}"


def _statement(folder: Path, public_key: Path | None) -> tuple[dict[str, Any], str]:
    try:
        doc = json.loads((folder / "provenance.json").read_text())
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{folder}: provenance.json is unreadable: {exc}") from None
    if "payloadType" in doc:
        return prov.open_envelope(doc, public_key.read_bytes() if public_key else None)
    if doc.get("_type") != prov.STATEMENT_TYPE:
        raise IntegrityError(f"{folder}: provenance.json is neither an in-toto statement nor a DSSE envelope")
    return doc, ""


def _load(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    summary = json.loads((folder / "release.json").read_text())
    measured = json.loads((folder / "measurements.json").read_text()) if (folder / "measurements.json").exists() else {}
    return summary, measured.get("latency", {})


def _change(before: float | None, after: float | None, digits: int = 0) -> str:
    """`1,234 → 1,200 (-2.8%)`; `—` for a side that has no figure."""
    def shown(x: float | None) -> str:
        return "—" if x is None else f"{x:,.{digits}f}"

    pct = f" ({(after - before) / before:+.1%})" if before and after is not None else ""
    return f"{shown(before)} → {shown(after)}{pct}"


def diff_dists(a: Path, b: Path) -> str:
    """What release `b` changes against release `a`, per product (see the module docstring)."""
    (ra, la), (rb, lb) = _load(a), _load(b)
    sums_a, sums_b = _sums(a), _sums(b)
    lines = [f"{ra['name']} {ra['version']} → {rb['name']} {rb['version']}"]
    for name in sorted(set(ra["products"]) | set(rb["products"])):
        pa, pb = ra["products"].get(name), rb["products"].get(name)
        if pa is None or pb is None:
            lines.append(f"{name}: {'added' if pa is None else 'removed'}")
            continue
        lines.append(f"{name}:")
        lines.append(f"  pte bytes      {_change(pa['pte_bytes'], pb['pte_bytes'])}")
        lines += update_summary(pa, pb, sums_a, sums_b) if "pte" in pb else []
        for g in sorted(set(pa["runtimes"]) | set(pb["runtimes"])):
            sa, sb = ra["runtimes"].get(g, {}), rb["runtimes"].get(g, {})
            lines.append(f"  runtime {g}: bytes {_change(sa.get('runtime_bytes'), sb.get('runtime_bytes'))}")
            ta, tb = la.get(name, {}).get(g, {}), lb.get(name, {}).get(g, {})
            lines.append(f"    latency ms   {_change(ta.get('median_ms'), tb.get('median_ms'), digits=3)}")
            ea, eb = pa["accuracy"].get(g, {}), pb["accuracy"].get(g, {})
            lines.append(f"    max abs error {ea.get('max_abs_error', '—')} → {eb.get('max_abs_error', '—')}")
        added, removed = sorted(set(pb["operators"]) - set(pa["operators"])), sorted(
            set(pa["operators"]) - set(pb["operators"]))
        lines.append(f"  operators      +{len(added)} -{len(removed)}"
                     + (f": {', '.join([*('+' + o for o in added), *('-' + o for o in removed)])}"
                        if added or removed else ""))
    return "\n".join(lines)


def _sums(folder: Path) -> dict[str, str]:
    """SHA256SUMS of a release directory, or nothing when it has none (a summary alone: no update line)."""
    return read_sums(folder) if (folder / "SHA256SUMS").is_file() else {}


def check_reproducible(release_file: Path, jobs: int = 1, keep: Path | None = None) -> tuple[dict[str, str], Path]:
    """Build the release twice, each in fresh build and dist directories with no cache and its own
    hash seed, and compare every file SHA256SUMS lists; ReleaseError naming the files that differ.
    Returns the sums and the first build's release directory (moved under `keep` if given)."""
    from etbuild.release.assemble import checkout_root, source_date_epoch

    epoch = str(source_date_epoch(checkout_root(release_file)))
    work = Path(tempfile.mkdtemp(prefix="etbuild-reproduce-"))
    started = [_start_build(release_file, work / f"build{i}", seed, epoch, jobs) for i, seed in enumerate(HASH_SEEDS)]
    dists = [_finished(proc, where) for proc, where in started]
    first, second = (read_sums(d) for d in dists)
    differ = sorted(n for n in set(first) | set(second) if first.get(n) != second.get(n))
    if differ:
        raise ReleaseError(f"{release_file}: two builds of the same inputs differ in {len(differ)} file(s): "
                           f"{', '.join(differ)} (kept in {work})")
    if keep is None:
        return first, dists[0]
    target = keep / dists[0].name
    if target.exists():
        shutil.rmtree(target)
    keep.mkdir(parents=True, exist_ok=True)
    os.replace(dists[0], target)
    return first, target


def _start_build(release_file: Path, where: Path, seed: str, epoch: str, jobs: int) -> tuple[Any, Path]:
    """Start `etbuild release` in a subprocess, in `where`, with the given hash seed."""
    env = {**os.environ, "PYTHONHASHSEED": seed, "SOURCE_DATE_EPOCH": epoch}
    cmd = [sys.executable, "-m", "etbuild.cli", "release", str(release_file.resolve()), "--build-dir",
           str(where / "build"), "--dist-dir", str(where / "dist"), "-n", str(jobs)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), where


def _finished(proc: Any, where: Path) -> Path:
    """Wait for a build `_start_build` started; its release directory."""
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise ReleaseError(f"reproducibility build in {where} failed (exit {proc.returncode}): "
                           f"{err.strip() or out.strip()[-2000:]}")
    (dist,) = (where / "dist").iterdir()
    return dist
