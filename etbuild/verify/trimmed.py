"""Run a `.pte` in a trimmed runtime, in a Python that can import nothing else of etbuild.

The subprocess runs `python -I -S -B`: isolated (no PYTHON* variables, no user site, no
current directory), without the `site` module, so no `.pth` file runs — in particular not
the finder an editable install of etbuild registers — and without writing bytecode into
the runtime. Its `sys.path` is set explicitly to the trimmed runtime (a directory or its
zip), the standard library, and the directories that hold numpy and flatbuffers; a
meta-path guard refuses every top-level module but the standard library, numpy,
flatbuffers and etbuild; `torch` is made unimportable. The script checks that `etbuild`
comes from the trimmed runtime before it runs anything.

The runner (`etbuild.runtime.runner`, which reads inputs from and writes outputs to `.npz`
files) is the verify stage's driver, not part of a product's runtime: it is passed in as
code, and everything it imports comes from the trimmed runtime.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from etbuild.errors import EtbuildError, InternalError, error_class

DEPENDENCIES = ("numpy", "flatbuffers")
TIMEOUT_S = 300

_BOOT = """
import json, sys
cfg = json.loads(sys.argv[1])
sys.path[:] = [cfg["runtime"], *[p for p in sys.path if p], *cfg["site"]]
sys.modules["torch"] = None
allowed = set(sys.stdlib_module_names) | set(cfg["allowed"])

class OnlyTheRuntime:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] not in allowed:
            raise ModuleNotFoundError(f"No module named {name!r} (the trimmed runtime may not use it)", name=name)
        return None

sys.meta_path.insert(0, OnlyTheRuntime)
import etbuild
if not etbuild.__file__.startswith(cfg["runtime"]):
    raise SystemExit(f"etbuild was imported from {etbuild.__file__}, not from the trimmed runtime")
sys.argv = ["python", *cfg["argv"]]
if cfg["module"]:
    import runpy
    runpy.run_module(cfg["module"], run_name="__main__", alter_sys=True)
else:
    exec(compile(cfg["code"], "<trimmed>", "exec"), {"__name__": "__main__"})
"""


def dependency_dirs() -> list[str]:
    """The import roots (site-packages directories) of numpy and flatbuffers."""
    dirs = []
    for name in DEPENDENCIES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise InternalError(f"{name} is not installed; the trimmed runtime needs it")
        root = str(Path(next(iter(spec.submodule_search_locations))).parent)
        if root not in dirs:
            dirs.append(root)
    return dirs


def run_isolated(
    runtime: str | Path, *, module: str = "", code: str = "", argv: Sequence[str | Path] = ()
) -> subprocess.CompletedProcess[str]:
    """Run `python -m module argv…` (or `code`) with only the trimmed runtime importable."""
    cfg = {
        "runtime": str(Path(runtime).resolve()),
        "site": dependency_dirs(),
        "allowed": ["etbuild", *DEPENDENCIES],
        "module": module,
        "code": code,
        "argv": [str(a) for a in argv],
    }
    # numpy's own BLAS, as the runtime's declared dependencies give it: not a library found beside the interpreter
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, "ETBUILD_BLAS": "numpy"}
    return subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", _BOOT, json.dumps(cfg)],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False,
    )


def run_trimmed(
    runtime_dir: str | Path, pte: str | Path, inputs_npz: str | Path, out_npz: str | Path, method: str = "forward",
    data: Sequence[Path] = (),
) -> None:
    """Run each sample of inputs_npz (`s<j>_in<k>`) through the trimmed runtime into out_npz.

    Raises the runtime's own error class with its message (e.g. InvalidProgram: `the trimmed
    runtime R: P.pte: method 'forward': instruction 3: operator aten::convolution.out has no
    kernel in this runtime`), InternalError for a crash.
    """
    argv: list[str | Path] = ["samples", pte, inputs_npz, out_npz, "--method", method]
    argv += [arg for path in data for arg in ("--data", path)]
    proc = run_isolated(runtime_dir, code=runner_source(), argv=argv)
    if proc.returncode != 0:
        raise _error(proc, f"the trimmed runtime {runtime_dir}")


def runner_source() -> str:
    """The source of etbuild's runner, to drive a runtime that does not ship it."""
    spec = importlib.util.find_spec("etbuild.runtime.runner")
    if spec is None or spec.origin is None:
        raise InternalError("cannot locate etbuild.runtime.runner")
    return Path(spec.origin).read_text()


def trimmed_kernels(runtime_dir: str | Path) -> set[str]:
    """The kernel names the trimmed runtime's `load_all()` returns."""
    code = "from etbuild.runtime.kernel_registry import load_all\nprint('\\n'.join(sorted(load_all())))"
    proc = run_isolated(runtime_dir, code=code)
    if proc.returncode != 0:
        raise _error(proc, f"the trimmed runtime {runtime_dir}")
    return set(proc.stdout.split())


def _error(proc: subprocess.CompletedProcess[str], what: str) -> EtbuildError:
    """The EtbuildError the runner's exit code stands for, or InternalError for a crash."""
    message = proc.stderr.strip().removeprefix("error: ")
    cls = error_class(proc.returncode)
    if cls is EtbuildError or "Traceback (most recent call last)" in proc.stderr:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        return InternalError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return cls(f"{what}: {message}")

