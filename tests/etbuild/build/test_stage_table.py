"""The stage table names its functions, so the task graph (and a no-op build) needs no torch."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from etbuild.build.driver import build
from etbuild.build.layout import Artifacts
from etbuild.build.stage_table import STAGE_FNS, STAGES, stage_calls
from etbuild.recipe import discover_recipes, load_recipe

ROOT = Path(__file__).resolve().parents[3]
NO_TORCH = 'import sys\nsys.modules["torch"] = None\n'


def _run_without_torch(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", NO_TORCH + script, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_every_stage_names_the_function_it_runs() -> None:
    from etbuild.stages import plan
    from etbuild.verify import stage

    assert set(STAGE_FNS) == set(STAGES)
    assert STAGE_FNS["plan"].load() is plan.run_plan
    assert STAGE_FNS["verify"].load() is stage.run_verify


def test_the_task_graph_of_every_recipe_is_made_without_torch(tmp_path: Path) -> None:
    paths = discover_recipes(ROOT / "recipes")
    expected = sum(len(stage_calls(r, Artifacts.of(r, tmp_path))) for r in map(load_recipe, paths))
    script = (
        "from pathlib import Path\n"
        "from etbuild.build.driver import doit_namespace\n"
        "from etbuild.recipe import discover_recipes, load_recipe\n"
        "ns = doit_namespace([load_recipe(p) for p in discover_recipes(sys.argv[1])], Path(sys.argv[2]))\n"
        "tasks = [t for k, create in ns.items() if k.startswith('task_') for t in create() if t['name']]\n"
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
        "print(len(tasks))\n"
    )
    proc = _run_without_torch(script, str(ROOT / "recipes"), str(tmp_path / "build"))
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) == expected


@pytest.mark.slow
def test_a_no_op_build_runs_without_torch(tmp_path: Path) -> None:
    recipe = ROOT / "recipes" / "mlp.yaml"
    assert build([recipe], tmp_path, stream=io.StringIO()).exit_code == 0
    script = "from etbuild.cli import main\nsys.exit(main(['build', '--build-dir', sys.argv[1], sys.argv[2]]))\n"
    proc = _run_without_torch(script, str(tmp_path), str(recipe))
    assert proc.returncode == 0, proc.stderr
    assert "0 task(s) run, 6 up to date" in proc.stdout
