"""The docs hold together: links resolve, guides stay short and current, every recipe key is documented.

Guides are `docs/*.md`; `docs/results/` is written by the benchmark scripts and `docs/log/` keeps the history of
experiments (docs/README.md).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MAX_GUIDE_LINES = 400
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def _markdown() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _guides() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name != "README.md")


def _prose(path: Path) -> str:
    return re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code blocks hold no links or headings


def _anchors(path: Path) -> set[str]:
    """The fragments of a page's headings, as GitHub makes them."""
    headings = (line.lstrip("#").strip().lower() for line in _prose(path).splitlines() if line.startswith("#"))
    return {re.sub(r"[^\w\- ]", "", heading).replace(" ", "-") for heading in headings}


def _broken_links(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in LINK.findall(_prose(path)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, fragment = target.partition("#")
        page = path.parent / file if file else path
        if not page.exists() or (fragment and page.suffix == ".md" and fragment not in _anchors(page)):
            broken.append(f"{path.relative_to(root)}: {target}")
    return broken


def test_every_relative_link_points_to_a_file_and_heading() -> None:
    broken = [b for path in _markdown() for b in _broken_links(path)]
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_links_are_found_and_checked(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# The part's title\n")
    page.write_text("# Top\n[a](there.md#the-parts-title) [b](gone.md) [c](https://x.org/y) [d](#top) [e](#nowhere)"
                    " [f](there.md#other)\n```\n[g](nope.md)\n```\n")
    assert _broken_links(page, tmp_path) == ["page.md: gone.md", "page.md: #nowhere", "page.md: there.md#other"]


def test_every_guide_is_under_the_line_limit() -> None:
    long = {p.name: n for p in _guides() if (n := len(p.read_text().splitlines())) >= MAX_GUIDE_LINES}
    assert not long, (f"guides of {MAX_GUIDE_LINES} lines or more: {long}; move measurements to docs/results/ "
                      "(written by the benchmark scripts) and the history of experiments to docs/log/")


def test_no_guide_heading_is_a_dated_log() -> None:
    dated = [f"{p.name}: {line}" for p in _guides() for line in p.read_text().splitlines()
             if line.startswith("#") and DATE.search(line)]
    assert not dated, "dated headings in guides (a measurement diary belongs in docs/log/):\n" + "\n".join(dated)


def _schema_keys(node: dict, path: tuple[str, ...], defs: dict, seen: frozenset[str] = frozenset()) -> set[str]:
    """Every key of the recipe schema as a dotted path, the list items' and mappings' own levels left out."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            return set()
        node, seen = {**defs[name], **node}, seen | {name}
        node.pop("$ref")
    keys: set[str] = set()
    for name, sub in node.get("properties", {}).items():
        keys |= {".".join((*path, name))} | _schema_keys(sub, (*path, name), defs, seen)
    for child in ("items", "additionalProperties"):
        if isinstance(node.get(child), dict):
            keys |= _schema_keys(node[child], path, defs, seen)
    for choice in ("anyOf", "oneOf", "allOf"):
        for sub in node.get(choice, []):
            keys |= _schema_keys(sub, path, defs, seen)
    return keys


def test_every_recipe_key_is_in_the_reference() -> None:
    schema = json.loads((ROOT / "schema" / "recipe.schema.json").read_text())
    keys = _schema_keys(schema, (), schema.get("$defs", {}))
    reference = (DOCS / "recipes.md").read_text()
    missing = sorted(k for k in keys if f"`{k}`" not in reference)
    assert {"name", "model.inputs.dtype", "model.dynamic.min", "backends.options"} <= keys
    assert not missing, f"recipe keys with no row in docs/recipes.md (add a row naming `key`): {missing}"


def _layout_rows() -> list[tuple[list[str], str]]:
    """README's layout table: the folders of each row's first cell and its second cell."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Layout", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows.append((re.findall(r"`([^`]+/)`", cells[0]), cells[1]))
    return rows


def test_the_readme_layout_table_names_folders_that_exist() -> None:
    rows = _layout_rows()
    missing = [folder for folders, _ in rows for folder in folders if not (ROOT / folder).is_dir()]
    assert not missing, f"README's layout table names folders that do not exist: {missing}"
    for folders, what in rows:
        for name in re.findall(r"`([\w./-]+(?:/|\.py|\.fbs|\.json))`", what):
            assert any((ROOT / f / name).exists() or any((ROOT / f).rglob(name)) for f in folders), (
                f"README's layout table: {name} is not under {', '.join(folders)}")


def test_every_top_level_folder_is_in_the_readme_layout_table() -> None:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: the tracked folders are unknown")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {line.split("/", 1)[0] + "/" for line in tracked.splitlines() if "/" in line}
    named = {folder for folders, _ in _layout_rows() for folder in folders}
    hidden = {f for f in folders if f.startswith(".")}
    assert folders - hidden <= named, f"folders missing from README's layout table: {sorted(folders - hidden - named)}"


NO_RESULTS_YET = {  # a script that still prints (and --json) only, because:
    "llm_runtime.py": "it was being reworked by another change when --results came; it moves at its next change",
}


def test_every_benchmark_script_writes_its_results_through_the_helper() -> None:
    """A script under benchmarks/ that runs on its own offers --results (benchmarks/results.py), so its numbers
    land in docs/results/ as a JSON file and its rendered table; timing.py and results.py are the shared helpers."""
    scripts = [p for p in sorted((ROOT / "benchmarks").glob("*.py"))
               if p.name not in ("timing.py", "results.py") and '__name__ == "__main__"' in p.read_text()]
    assert len(scripts) > 10
    missing = [p.name for p in scripts if "add_option(" not in p.read_text() and p.name not in NO_RESULTS_YET]
    assert not missing, f"benchmark scripts without --results (results.add_option): {missing}"
