"""Load a script of `benchmarks/` as a module, as it runs: with the folder on the path for the modules beside it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(name: str) -> ModuleType:
    """`benchmarks/<name>.py` imported under `name` (it may import results.py and the scripts beside it)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module
