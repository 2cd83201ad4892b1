"""etbuild.release.check: a release directory against its sums and provenance, and two releases compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etbuild.errors import IntegrityError
from etbuild.release import provenance as prov
from etbuild.release.assemble import write_sums
from etbuild.release.check import diff_dists, read_sums, verify_dist


def dist(folder: Path, byproduct: str | None = None) -> Path:
    """A release directory: two files, SHA256SUMS, an unsigned statement (a file as byproduct)."""
    (folder / "products").mkdir(parents=True)
    (folder / "products" / "a.pte").write_bytes(b"pte")
    (folder / "release.json").write_text("{}")
    sums = write_sums(folder)
    details = {"byproducts": [{"name": byproduct, "digest": {"sha256": "0" * 64}}]} if byproduct else {}
    if byproduct:
        (folder / byproduct).write_text("measured")
    (folder / "provenance.json").write_text(json.dumps(prov.statement(sums, {"runDetails": details})))
    return folder


def test_write_and_read_sums_sorted_by_path(tmp_path: Path) -> None:
    folder = dist(tmp_path / "d")
    lines = (folder / "SHA256SUMS").read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == ["products/a.pte", "release.json"]
    assert read_sums(folder)["products/a.pte"] == lines[0].split("  ")[0]


def test_read_sums_errors(tmp_path: Path) -> None:
    with pytest.raises(IntegrityError, match="no SHA256SUMS; not a release directory"):
        read_sums(tmp_path)
    (tmp_path / "SHA256SUMS").write_text(f"{'a' * 64}  x\nabc x\n")
    with pytest.raises(IntegrityError) as err:
        read_sums(tmp_path)
    assert str(err.value) == f"{tmp_path / 'SHA256SUMS'}:2: expected '<sha256>  <path>'; got 'abc x'"


def test_verify_an_intact_release(tmp_path: Path) -> None:
    assert verify_dist(dist(tmp_path)) == "2 files match SHA256SUMS and provenance.json; provenance not signed"


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "products" / "a.pte").write_bytes(b"PTE"), "products/a.pte has sha256 "),
    (lambda d: (d / "products" / "a.pte").unlink(), "products/a.pte is listed in SHA256SUMS but missing"),
    (lambda d: (d / "products" / "b.pte").write_bytes(b""), "files not in SHA256SUMS: products/b.pte"),
    (lambda d: (d / "provenance.json").write_text("{"), "provenance.json is unreadable"),
    (lambda d: (d / "provenance.json").write_text("{}"), "neither an in-toto statement nor a DSSE envelope"),
    (lambda d: (d / "provenance.json").write_text(json.dumps(prov.statement({}, {"runDetails": {}}))),
     "provenance subjects differ from SHA256SUMS at products/a.pte"),
], ids=["changed", "missing", "extra", "unreadable-provenance", "not-a-statement", "other-subjects"])
def test_verify_names_what_is_wrong(tmp_path: Path, damage, message: str) -> None:
    folder = dist(tmp_path)
    damage(folder)
    with pytest.raises(IntegrityError, match=message.replace(".", r"\.")):
        verify_dist(folder)


def test_a_byproduct_must_match_its_digest(tmp_path: Path) -> None:
    with pytest.raises(IntegrityError, match="measurements.json does not match its digest in provenance.json"):
        verify_dist(dist(tmp_path, byproduct="measurements.json"))


def summary(folder: Path, version: str, products: dict, latency: dict | None = None) -> Path:
    folder.mkdir()
    runtimes = {"all": {"runtime_bytes": 1000}}
    (folder / "release.json").write_text(json.dumps({"name": "r", "version": version, "products": products,
                                                     "runtimes": runtimes}))
    if latency is not None:
        (folder / "measurements.json").write_text(json.dumps({"latency": latency}))
    return folder


def product(pte_bytes: int, operators: list[str]) -> dict:
    return {"pte_bytes": pte_bytes, "runtimes": ["all"], "accuracy": {"all": {"max_abs_error": 0.5}},
            "operators": operators}


def test_diff_shows_changes_added_and_removed_products(tmp_path: Path) -> None:
    a = summary(tmp_path / "a", "1", {"kept": product(1000, ["aten::add.out", "aten::mm.out"]),
                                      "gone": product(5, [])}, latency={"kept": {"all": {"median_ms": 2.0}}})
    b = summary(tmp_path / "b", "2", {"kept": product(1100, ["aten::mm.out", "aten::relu.out"]),
                                      "new": product(5, [])})
    assert diff_dists(a, b) == "\n".join([
        "r 1 → r 2",
        "gone: removed",
        "kept:",
        "  pte bytes      1,000 → 1,100 (+10.0%)",
        "  runtime all: bytes 1,000 → 1,000 (+0.0%)",
        "    latency ms   2.000 → —",
        "    max abs error 0.5 → 0.5",
        "  operators      +1 -1: +aten::relu.out, -aten::add.out",
        "new: added",
    ])
