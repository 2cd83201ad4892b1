"""One trimmed runtime for several built recipes: the union of what their programs need.

Reads each recipe's built `.pte` and `lowered.unplanned` (the build must have run), writes
`build/union/<name>/` as the select stage writes `build/<recipe>/`, and verifies every recipe
on the union runtime. `etbuild select --union` and releases' runtime groups use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etbuild.build.layout import Artifacts
from etbuild.fsutil import write_bytes, write_json
from etbuild.recipe import Recipe
from etbuild.select import Selection, collect, generate_runtime, selected_operators_yaml
from etbuild.stages.select import size_report
from etbuild.verify.stage import verify


def union_selection(recipes: list[Recipe], build_root: Path) -> Selection:
    """What the built programs of several recipes need together."""
    selections = [collect(a.pte, a.lowered) for a in (Artifacts.of(r, build_root) for r in recipes)]
    return selections[0].union(selections[1:])


def run_union(recipes: list[Recipe], build_root: Path, name: str) -> dict[str, Any]:
    """One trimmed runtime for the union of several built recipes, each verified against it.

    Writes `build/union/<name>/` (runtime/, selected_operators.yaml, select.json) and
    returns the select.json content; raises VerificationError when a recipe fails on it.
    """
    union = union_selection(recipes, build_root)
    out = build_root / "union" / name
    source = ", ".join(f"recipe {r.name}" for r in recipes)
    write_bytes(out / "selected_operators.yaml", selected_operators_yaml(union, source).encode())
    runtime = generate_runtime(union, out / "runtime", source=source, name=name)
    report = size_report(union, runtime.total_bytes, runtime.zip_bytes)
    built = [(r, Artifacts.of(r, build_root)) for r in recipes]
    report["recipes"] = {r.name: verify(r, a.pte, runtime.root, a.quantized if r.quantize else None)["passed"]
                         for r, a in built}
    write_json(out / "select.json", report)
    return report
