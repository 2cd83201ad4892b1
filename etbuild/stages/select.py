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
