"""The bundled program of a recipe (`verify: {bundle: true}`): `<recipe>.bpte` beside the `.pte`.

Its test cases are verify's samples (the same seed, so the same inputs verify checked), run in
order per method; the expected outputs are eager PyTorch's for a float program and the converted
(quantized) torch model's for a quantized one, as verify's tight check compares. The tolerances
that make ExecuTorch's per-element test (`|actual − expected| ≤ atol + rtol × |expected|`) the
one verify applies go into `verify.json`'s `bundle`, per method: for a float program rtol 0 and
atol the largest of its outputs' bounds (`rtol × max|eager| + atol`, etbuild.verify.compare); for
a quantized one the recipe's rtol, and its atol plus the larger of the largest output's
quantization step and what verify accepted: verify passes a quantized output whose elements
stray further than a step when its SNR against the converted model is as good as rounding
allows (etbuild.quantize.checks), so the bundle allows the largest error verify measured, in our
runtime or in ExecuTorch's, with HEADROOM for another machine's rounding (XNNPACK's kernels
differ between CPUs).
`etbuild run x.bpte --verify` reads them from there; on a device, pass them to
`verify_result_with_bundled_expected_output`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from etbuild.devtools.bundle_format import write_bundle
from etbuild.fsutil import write_bytes
from etbuild.model import build_model, call_method, fresh, sample_inputs
from etbuild.recipe import Recipe
from etbuild.stages import handoff

HEADROOM = 1.25  # a quantized bundle's atol over the largest error verify accepted


def _numpy(x: Any) -> Any:
    return x.detach().numpy() if isinstance(x, torch.Tensor) else x


def method_cases(recipe: Recipe, method: str, quantized: Path | None,
                 built: torch.nn.Module | None = None) -> list[tuple[list[Any], list[Any]]]:
    """(inputs, expected outputs) per verify sample of one method, on fresh state (a copy of `built`, the recipe's
    model as built; None: built here)."""
    samples = sample_inputs(recipe, recipe.verify.samples, recipe.verify.seed, method)
    if quantized is None:
        model = fresh(built) if built is not None else build_model(recipe)
        outputs = [call_method(recipe, model, method, s) for s in samples]
    else:
        module = handoff.read(quantized).module()
        with torch.no_grad():
            outputs = [module(*s) for s in samples]
    return [([_numpy(x) for x in s], [np.asarray(_numpy(o)) for o in tree_flatten(out)[0]])
            for s, out in zip(samples, outputs)]


def tolerances(recipe: Recipe, report: Mapping[str, Any], quantized: bool) -> dict[str, dict[str, float]]:
    """Per method, the rtol and atol of ExecuTorch's test that match verify's (module docstring)."""
    cfg = recipe.verify
    out = {}
    for method, outputs in report["methods"].items():
        if quantized:
            theirs = report.get("executorch", {}).get("methods", {}).get(method, [])
            step = max((float(o.get("step", 0.0)) for o in outputs), default=0.0)
            seen = max((float(o.get("max_abs_error", 0.0)) for o in [*outputs, *theirs]), default=0.0)
            out[method] = {"rtol": cfg.rtol, "atol": cfg.atol + max(step, HEADROOM * seen)}
        else:
            out[method] = {"rtol": 0.0, "atol": max((float(o.get("bound", 0.0)) for o in outputs), default=0.0)}
    return out


def write_recipe_bundle(
    recipe: Recipe, pte: Path, out: Path, report: Mapping[str, Any], quantized: Mapping[str, Path] | None = None,
    model: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """Write the recipe's `.bpte` to `out`; the `bundle` entry of `verify.json` (file, tolerances). `model`: the
    recipe's model as built (None: built here)."""
    suites = {m.name: method_cases(recipe, m.name, quantized[m.name] if quantized else None, model)
              for m in recipe.model.methods}
    write_bytes(out, write_bundle(pte.read_bytes(), suites))
    return {"file": out.name, "cases": {m: len(c) for m, c in suites.items()},
            "tolerances": tolerances(recipe, report, bool(quantized)),
            "test": "|actual - expected| <= atol + rtol * |expected|, per element"}
