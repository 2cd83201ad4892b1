"""Verify stage: the `.pte` in its trimmed runtime, without torch, against eager PyTorch.

Takes: the final `.pte`, its trimmed runtime (`runtime/<recipe>-runtime.zip`, from select), the
recipe's model and `verify` section. Gives: `verify.json` with, per method and output, the
largest absolute and relative error over `verify.samples` random inputs (dynamic dims drawn
within their ranges) and whether it is within `rtol`/`atol`. Samples run in order on one
loaded method, as they do on one eager model, so state carried across calls (mutable
buffers) is compared too. The program runs in the trimmed runtime alone, in a subprocess
whose import path holds only it and numpy (no etbuild install, no torch): a pass proves the
runtime that ships is enough.

A program with delegates is compared a second time, run in ExecuTorch's own runtime (the
`executorch` oracle, in a subprocess), when that is installed: `verify.json`'s `executorch`
holds the same per-output report, or why it was skipped.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from etbuild.errors import EtbuildError, StageError, VerificationError
from etbuild.fsutil import write_json
from etbuild.model import build_model, call_method, sample_inputs
from etbuild.oracle import executorch_installed, run_samples_in_executorch
from etbuild.recipe import Recipe
from etbuild.runtime.format.pte import read_program
from etbuild.select import run_trimmed

Runner = Callable[[Path, Path, Path, str], None]
"""Runs a program's samples: (pte, inputs .npz, outputs .npz, method)."""


def trimmed_runner(runtime: Path) -> Runner:
    """The trimmed runtime at `runtime`, in an isolated subprocess."""
    def run(pte: Path, ins: Path, outs: Path, method: str) -> None:
        try:
            run_trimmed(runtime, pte, ins, outs, method)
        except EtbuildError as exc:
            raise VerificationError(f"{pte} failed in its trimmed runtime: {exc}") from None
    return run


def run_samples(
    run: Runner, pte: Path, samples: list[tuple[Any, ...]], method: str = "forward"
) -> list[list[np.ndarray]]:
    """Outputs of each sample, in order on one loaded method, from a runner."""
    with tempfile.TemporaryDirectory(prefix="etbuild-verify-") as tmp:
        ins, outs = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(ins, **{f"s{j}_in{k}": _numpy(x) for j, s in enumerate(samples) for k, x in enumerate(s)})
        run(pte, ins, outs, method)
        with np.load(outs) as npz:
            count = len([k for k in npz.files if k.startswith("s0_out")])
            return [[npz[f"s{j}_out{k}"] for k in range(count)] for j in range(len(samples))]


def _numpy(x: Any) -> Any:
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def compare(
    expected: list[list[np.ndarray]], actual: list[list[np.ndarray]], rtol: float, atol: float
) -> list[dict[str, Any]]:
    """Per output: shape, dtype, largest absolute and relative error, pass/fail."""
    report = []
    for k in range(len(expected[0])):
        exp = [np.asarray(s[k]) for s in expected]
        act = [np.asarray(s[k]) for s in actual]
        ok = all(e.shape == a.shape and e.dtype == a.dtype for e, a in zip(exp, act))
        abs_err = rel_err = 0.0
        if ok:
            for e, a in zip(exp, act):
                diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
                if diff.size:
                    abs_err = max(abs_err, float(diff.max()))
                    rel_err = max(rel_err, float((diff / np.maximum(np.abs(e.astype(np.float64)), 1e-12)).max()))
                ok = ok and bool(np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True))
        report.append({
            "index": k, "shape": list(exp[0].shape), "dtype": str(exp[0].dtype),
            "max_abs_error": abs_err, "max_rel_error": rel_err, "passed": ok,
        })
    return report


def verify_method(recipe: Recipe, pte: Path, run: Runner, method: str) -> list[dict[str, Any]]:
    """Per-output comparison of one method, run by `run`, with eager torch on fresh state."""
    cfg = recipe.verify
    samples = sample_inputs(recipe, cfg.samples, cfg.seed, method)
    model = build_model(recipe)
    expected = [[_numpy(t) for t in tree_flatten(call_method(recipe, model, method, s))[0]] for s in samples]
    actual = run_samples(run, pte, samples, method)
    if len(actual[0]) != len(expected[0]):
        got, want = len(actual[0]), len(expected[0])
        raise StageError(f"{pte} method {method} returns {got} outputs; the model returns {want}")
    return compare(expected, actual, cfg.rtol, cfg.atol)


def verify(recipe: Recipe, pte: Path, runtime: Path) -> dict[str, Any]:
    """Compare every method of the program, run in `runtime`, with eager torch; a program with
    delegates also in ExecuTorch's runtime (`executorch`), when the oracle is installed."""
    cfg = recipe.verify
    methods = _methods(recipe, pte, trimmed_runner(runtime))
    report = {"samples": cfg.samples, "rtol": cfg.rtol, "atol": cfg.atol, "methods": methods}
    report["passed"] = _passed(methods)
    if has_delegates(pte):
        report["executorch"] = _in_executorch(recipe, pte)
        report["passed"] = report["passed"] and report["executorch"].get("passed", True)
    return report


def _methods(recipe: Recipe, pte: Path, run: Runner) -> dict[str, list[dict[str, Any]]]:
    return {m.name: verify_method(recipe, pte, run, m.name) for m in recipe.model.methods}


def _passed(methods: dict[str, list[dict[str, Any]]]) -> bool:
    return all(o["passed"] for outputs in methods.values() for o in outputs)


def _in_executorch(recipe: Recipe, pte: Path) -> dict[str, Any]:
    """The same comparison with the program run in ExecuTorch's runtime, or why it was skipped."""
    if not executorch_installed():
        return {"skipped": "the executorch oracle is not installed (pip install -e '.[interop]')"}
    methods = _methods(recipe, pte, run_samples_in_executorch)
    return {"methods": methods, "passed": _passed(methods)}


def has_delegates(pte: Path) -> bool:
    """Whether any method of the program calls a backend delegate."""
    program, _ = read_program(pte.read_bytes())
    return any(plan.delegates for plan in program.execution_plan)


def run_verify(recipe: Recipe, pte: Path, runtime: Path, out: Path) -> None:
    """Write `verify.json`; raise VerificationError (after writing it) when an output fails."""
    report = verify(recipe, pte, runtime)
    write_json(out, report)
    if not report["passed"]:
        where = [("", report["methods"]), (" in ExecuTorch's runtime", report.get("executorch", {}).get("methods", {}))]
        details = "; ".join(
            f"{method} output {o['index']}{runtime}: max abs error {o['max_abs_error']:.3g}, "
            f"max rel error {o['max_rel_error']:.3g}"
            for runtime, methods in where for method, outputs in methods.items() for o in outputs if not o["passed"]
        )
        raise VerificationError(
            f"{recipe.name}: {pte.name} differs from eager PyTorch beyond rtol={recipe.verify.rtol}, "
            f"atol={recipe.verify.atol} on {recipe.verify.samples} samples: {details} (see {out})"
        )
