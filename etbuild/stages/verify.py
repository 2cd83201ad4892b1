"""Verify stage: the `.pte` in its trimmed runtime, without torch, against eager PyTorch.

Takes: the final `.pte`, its trimmed runtime (`runtime/<recipe>-runtime.zip`, from select), the
recipe's model and `verify` section. Gives: `verify.json` with, per method and output, the
largest absolute error over `verify.samples` random inputs (dynamic dims drawn within their
ranges), the bound it must stay within (`rtol × max|eager| + atol`, `verify_compare`) and
whether the eager output varies across the samples; for a method whose outputs do not, the
comparison of its last intermediate value that does (`verify_intermediate`). Samples run in
order on one loaded method, as they do on one eager model, so state carried across calls
(mutable buffers) is compared too. The program runs in the trimmed runtime alone, in a subprocess
whose import path holds only it and numpy (no etbuild install, no torch): a pass proves the
runtime that ships is enough.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from etbuild.errors import EtbuildError, StageError, VerificationError
from etbuild.fsutil import write_json
from etbuild.localise import describe_divergence, localise_recipe
from etbuild.model import build_model, call_method, sample_inputs
from etbuild.recipe import Recipe
from etbuild.select import run_trimmed
from etbuild.stages.export import export_method
from etbuild.stages.verify_compare import compare, describe
from etbuild.stages.verify_intermediate import compare_intermediate


def run_trimmed_samples(
    runtime: Path, pte: Path, samples: list[tuple[Any, ...]], method: str = "forward"
) -> list[list[np.ndarray]]:
    """Outputs of each sample from the trimmed runtime at `runtime`, in an isolated subprocess."""
    with tempfile.TemporaryDirectory(prefix="etbuild-verify-") as tmp:
        ins, outs = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(ins, **{f"s{j}_in{k}": _numpy(x) for j, s in enumerate(samples) for k, x in enumerate(s)})
        try:
            run_trimmed(runtime, pte, ins, outs, method)
        except EtbuildError as exc:
            raise VerificationError(f"{pte} failed in its trimmed runtime: {exc}") from None
        with np.load(outs) as npz:
            count = len([k for k in npz.files if k.startswith("s0_out")])
            return [[npz[f"s{j}_out{k}"] for k in range(count)] for j in range(len(samples))]


def _numpy(x: Any) -> Any:
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def verify_method(recipe: Recipe, pte: Path, runtime: Path, method: str) -> dict[str, Any]:
    """One method against eager torch on fresh state, per output (and an intermediate value if no output varies)."""
    cfg = recipe.verify
    samples = sample_inputs(recipe, cfg.samples, cfg.seed, method)
    model = build_model(recipe)
    expected = [[_numpy(t) for t in tree_flatten(call_method(recipe, model, method, s))[0]] for s in samples]
    actual = run_trimmed_samples(runtime, pte, samples, method)
    if len(actual[0]) != len(expected[0]):
        got, want = len(actual[0]), len(expected[0])
        raise StageError(f"{pte} method {method} returns {got} outputs; the model returns {want}")
    report: dict[str, Any] = {"outputs": compare(expected, actual, cfg.rtol, cfg.atol)}
    if all(o.get("varies") is False for o in report["outputs"]):
        exported = export_method(recipe, build_model(recipe), method)
        report["intermediate"] = compare_intermediate(exported, samples, cfg.rtol, cfg.atol)
    return report


def verify(recipe: Recipe, pte: Path, runtime: Path) -> dict[str, Any]:
    """Compare every method of the program, run in `runtime`, with eager torch."""
    cfg = recipe.verify
    reports = {m.name: verify_method(recipe, pte, runtime, m.name) for m in recipe.model.methods}
    methods = {name: r["outputs"] for name, r in reports.items()}
    intermediates = {name: r["intermediate"] for name, r in reports.items() if "intermediate" in r}
    passed = all(c["passed"] for outputs in methods.values() for c in outputs) and all(
        c["passed"] for c in intermediates.values())
    return {"samples": cfg.samples, "rtol": cfg.rtol, "atol": cfg.atol, "bound": "rtol * max|eager| + atol",
            "methods": methods, "constant_outputs": _constant_outputs(methods), "intermediates": intermediates,
            "passed": passed}


def _constant_outputs(methods: dict[str, list[dict[str, Any]]]) -> list[str]:
    """`forward output 0`, … for every output whose eager values are the same for every sample."""
    return [f"{name} output {o['index']}" for name, outputs in methods.items() for o in outputs
            if o.get("varies") is False]


def run_verify(
    recipe: Recipe, pte: Path, runtime: Path, out: Path, exports: Mapping[str, Path] | None = None,
    debug_map: Path | None = None,
) -> None:
    """Write `verify.json`; raise VerificationError (after writing it) when an output fails.

    With the exports and the lower stage's debug map, a failure is localised first: each failing
    method's first diverging node goes into `verify.json` (`first_divergence`) and the error.
    """
    report = verify(recipe, pte, runtime)
    if not report["passed"] and exports is not None and debug_map is not None:
        failing = [m for m, outputs in report["methods"].items() if not all(o["passed"] for o in outputs)]
        report["first_divergence"] = localise_recipe(recipe, pte, exports, debug_map, failing)
    write_json(out, report)
    failures = [f"{method} output {o['index']}: {describe(o)}"
                for method, outputs in report["methods"].items() for o in outputs if not o["passed"]]
    failures += [f"{method} intermediate {c['node']} in {c['module'] or 'the model'}: {describe(c)}"
                 for method, c in report["intermediates"].items() if not c["passed"]]
    if failures:
        raise VerificationError(
            f"{recipe.name}: {pte.name} differs from eager PyTorch beyond rtol={recipe.verify.rtol}, "
            f"atol={recipe.verify.atol} on {recipe.verify.samples} samples: {'; '.join(failures)} (see {out})"
            + "".join(f"\n  {describe_divergence(m, d)}" for m, d in report.get("first_divergence", {}).items())
        )
