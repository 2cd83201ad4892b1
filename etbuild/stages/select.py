"""Select stage: what the final program calls → allowlist check, op list, trimmed runtime.

Takes: `<recipe>.pte` (the final program: lowering can add operators, so the export graph
is not enough), `lowered.unplanned` (the same instructions with their source frames) and the
recipe's `operators` section. A program that calls an operator ExecuTorch's runtime lacks
fails here (lowering emits none; this holds it for what comes after). Gives: `selected_operators.yaml` in ExecuTorch's
selective-build format, `runtime/` (a package directory and `<recipe>-runtime.zip` with
only the kernels, runtime features and tensor dtypes the program uses) and `select.json`
(operators, dtypes, backends, runtime features, and the trimmed runtime's bytes next to the
full runtime's). A program that calls an operator
outside `operators.allow` fails here, naming each operator and where it came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etbuild.errors import StageError
from etbuild.fsutil import write_bytes, write_json
from etbuild.lowering.operator_set import EXECUTORCH_VERSION, executorch_operators
from etbuild.recipe import Recipe
from etbuild.runtime.tensor import numpy_dtype
from etbuild.select import (
    Selection,
    check_allowed,
    collect,
    full_runtime_bytes,
    generate_runtime,
    selected_operators_yaml,
)
from etbuild.select.allowlist import describe_use
from etbuild.tasks import Artifacts


def size_report(selection: Selection, runtime_bytes: int, zip_bytes: int) -> dict[str, Any]:
    full = full_runtime_bytes()
    return {
        "operators": {op.name: {"calls": op.count, "dtypes": list(op.dtypes)} for op in selection.operators},
        "backends": list(selection.backends),
        "runtime_features": list(selection.features),
        "tensor_dtypes": [numpy_dtype(code).name for code in selection.scalar_types],
        "runtime_bytes": runtime_bytes, "runtime_zip_bytes": zip_bytes, "full_runtime_bytes": full,
        "runtime_fraction": round(runtime_bytes / full, 4),
    }


def check_executorch(selection: Selection, base_dir: Path) -> None:
    """Raise StageError naming each operator the program calls that ExecuTorch's runtime lacks.

    Lowering emits only ExecuTorch's operators, so this fails only when something after it
    (or a lowering bug) adds one: the program would not load in ExecuTorch's runtime.
    """
    lacking = [op for op in selection.operators if op.name not in executorch_operators()]
    if lacking:
        lines = "\n".join(f"  {describe_use(op, base_dir)}" for op in lacking)
        raise StageError(f"the program calls operators ExecuTorch {EXECUTORCH_VERSION}'s runtime does not have:\n"
                         f"{lines}\n  decompose them (etbuild/lowering/decompositions.py) or leave them to a backend")


def run_select(recipe: Recipe, pte: Path, lowered: Path, out: Path) -> None:
    """Write selected_operators.yaml, runtime/ and select.json into `out` (build/<recipe>)."""
    selection = collect(pte, lowered)
    check_executorch(selection, recipe.path.parent)
    if recipe.operators.allow is not None:
        check_allowed(selection, recipe.operators.allow, recipe.where("operators.allow"), base_dir=recipe.path.parent)
    source = f"recipe {recipe.name}"  # not its path: outputs must not depend on where the checkout is
    write_bytes(out / "selected_operators.yaml", selected_operators_yaml(selection, source).encode())
    runtime = generate_runtime(selection, out / "runtime", source=source, name=recipe.name)
    write_json(out / "select.json", size_report(selection, runtime.total_bytes, runtime.zip_bytes))


def union_selection(recipes: list[Recipe], build_root: Path) -> Selection:
    """What the built programs of several recipes need together."""
    selections = [collect(a.pte, a.lowered) for a in (Artifacts.of(r, build_root) for r in recipes)]
    return selections[0].union(selections[1:])


def run_union(recipes: list[Recipe], build_root: Path, name: str) -> dict[str, Any]:
    """One trimmed runtime for the union of several built recipes, each verified against it.

    Writes `build/union/<name>/` (runtime/, selected_operators.yaml, select.json) and
    returns the select.json content; raises VerificationError when a recipe fails on it.
    """
    from etbuild.stages.verify import verify

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
