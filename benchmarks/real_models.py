"""Real architectures, tried as a new user would: build, verify, run in ExecuTorch, compare sizes.

    python benchmarks/real_models.py [NAME ...] [--keep DIR] [--json out.json]

Each model is a small randomly initialised configuration from the libraries people take
models from (transformers, timm; torchvision's pure-Python models), built from a factory in
this file: no download. Per model it writes a recipe (`factory: <this file>:<name>`) into a
temporary directory, runs `etbuild build` on it (export → … → verify), runs the `.pte` in
ExecuTorch's runtime against our runtime's outputs, builds the same model with ExecuTorch's
own flow and reports both `.pte` sizes. Needs the `interop` extra and `timm`/`transformers`.

torchvision's wheel on PyPI may not load its C extension beside a CPU-only torch; its import
then stops on a fake-kernel registration for `torchvision::nms`. Its model code is pure
Python, so `_torchvision_without_ops` defines the two schemas that import needs first.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tier's zoo lives in the tests package: one definition for both

from tests.models.zoo import ARCHITECTURES  # noqa: E402

MODELS = ARCHITECTURES
ZOO = ROOT / "tests" / "models" / "zoo.py"


# ------------------------------------------------------------------ the probe


@dataclass
class Result:
    """One model's row of the report."""

    name: str
    builds: bool = False
    verifies: bool = False
    runs_in_executorch: bool | None = None
    max_diff_executorch: float | None = None
    pte_bytes: int | None = None
    executorch_pte_bytes: int | None = None
    error: str = ""


def write_recipe(name: str, root: Path) -> Path:
    """A recipe for model `name` whose factory is this file."""
    import yaml

    arch = MODELS[name]
    recipe = {"name": name.replace("_", "-"), "model": {"factory": f"{ZOO}:{name}", "inputs": arch.inputs}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def probe(name: str, root: Path) -> Result:
    from etbuild.build import build
    from etbuild.recipe import load_recipe

    result = Result(name)
    recipe = load_recipe(write_recipe(name, root))
    built = build([recipe.path], root / "build", stream=io.StringIO())
    pte = root / "build" / recipe.name / f"{recipe.name}.pte"
    result.builds = pte.exists()
    result.verifies = built.exit_code == 0
    result.error = "; ".join(built.failed.values())
    if result.builds:
        result.pte_bytes = pte.stat().st_size
        _compare_in_executorch(recipe, pte, result)
    _executorch_size(recipe, root / f"{name}.executorch.pte", result)
    return result


def _compare_in_executorch(recipe: Any, pte: Path, result: Result) -> None:
    from executorch.runtime import Runtime

    from etbuild.model import sample_inputs
    from etbuild.runtime import Program

    sample = sample_inputs(recipe, 1, 7)[0]
    ours = Program.load(pte).load_method("forward")(*[t.numpy() for t in sample])
    try:
        theirs = Runtime.get().load_program(pte).load_method("forward").execute(list(sample))
    except Exception as exc:  # ExecuTorch's runtime: any failure is the finding
        result.runs_in_executorch = False
        result.error += f" executorch: {type(exc).__name__}: {exc}"
        return
    diffs = [float(np.max(np.abs(np.asarray(a) - t.numpy()), initial=0.0)) for a, t in zip(ours, theirs)]
    result.runs_in_executorch = True
    result.max_diff_executorch = max(diffs, default=0.0)


def _executorch_size(recipe: Any, path: Path, result: Result) -> None:
    from etbuild.oracle import executorch_build

    try:
        result.executorch_pte_bytes = executorch_build(recipe, path).path.stat().st_size
    except Exception as exc:  # ExecuTorch's own flow: any failure is reported, not ours to fix
        result.error += f" executorch build: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def table(results: list[Result]) -> str:
    head = f"{'model':16} {'builds':6} {'verif':6} {'in ET':6} {'ET diff':9} {'ours B':>9} {'ET B':>9} {'ratio':>6}"
    rows = [head]
    for r in results:
        ratio = f"{r.pte_bytes / r.executorch_pte_bytes:.3f}" if r.pte_bytes and r.executorch_pte_bytes else "-"
        diff = f"{r.max_diff_executorch:.1e}" if r.max_diff_executorch is not None else "-"
        rows.append(f"{r.name:16} {r.builds!s:6} {r.verifies!s:6} {r.runs_in_executorch!s:6} {diff:9} "
                    f"{r.pte_bytes or '-':>9} {r.executorch_pte_bytes or '-':>9} {ratio:>6}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[[], *MODELS], default=[])
    parser.add_argument("--keep", type=Path, help="build here instead of a temporary directory")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = args.names or list(MODELS)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        results = []
        for name in names:
            try:
                results.append(probe(name, root))
            except Exception:  # a probe crash is a finding to report, the next model still runs
                results.append(Result(name, error=traceback.format_exc(limit=-3)))
            print(table(results[-1:]).splitlines()[1], results[-1].error[:300], flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0 if all(r.verifies and r.runs_in_executorch for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
