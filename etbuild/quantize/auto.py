"""`observer: auto`: calibrate with each candidate observer and keep the one closest to float.

No observer is best on every model: on the real-model tier's CNNs min/max and histogram each
lead on about half, by up to 3.6 dB (docs/quantization.md). Per method, `auto` prepares,
calibrates and converts once per observer of `AUTO_CANDIDATES`, measures each converted model's
output SNR against the float graph on the verify samples, and keeps the best; a tie keeps the
first, min/max. The calibration samples are not judged on: min/max's ranges hold every value
they produced, so they favour it (judged on the first 16 calibration samples and the verify
samples, `auto` chose min/max on 3 of the tier's 18 CNNs where the histogram was 1.1–1.6 dB
better on held-out inputs; on the verify samples alone it missed 3 by 0.2–1.1 dB).
Every `auto` of the recipe (its observer and the overrides') takes the same candidate. A method
without static activations needs no choice.

Given a judge (etbuild.quantize.program_judge: the candidate lowered into a program and run in our
runtime), `auto` keeps the candidate whose *program* is closest to float instead: converted models
level to 0.01 dB can give programs a decibel apart, by how one scale's rounding falls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from torch.fx import GraphModule

from etbuild.quantize import flow
from etbuild.quantize.fallback.graph import Outputs, outputs, snr_db_of
from etbuild.quantize.metrics import db
from etbuild.quantize.schemes import AUTO_CANDIDATES, MINMAX, STATIC


@dataclass(frozen=True)
class Chosen:
    """The plan with `auto` resolved, its converted model, and the report's record (None: nothing
    was chosen)."""

    plan: flow.Plan
    model: GraphModule
    record: dict[str, Any] | None


def quantize(ep: Any, plan: flow.Plan, calibration: Any, verify: Any, reference: GraphModule,
             judge: Callable[[GraphModule], Outputs] | None = None) -> Chosen:
    """The converted model of `ep` under `plan`, with each `auto` observer resolved by measurement:
    of the converted model's outputs on `verify`, or of `judge(model)`'s (its program's) when given."""
    schemes = plan.schemes
    if not schemes.uses_auto:
        return Chosen(plan, flow.quantize(ep, plan, calibration), None)
    if not _static(plan):
        resolved = replace(plan, schemes=schemes.resolving_auto(MINMAX))
        return Chosen(resolved, flow.quantize(ep, resolved, calibration), None)
    expected = outputs(reference, verify)
    best: tuple[float, str, flow.Plan, GraphModule] | None = None
    measured: dict[str, float | None] = {}
    programs: dict[str, float | None] = {}
    for observer in AUTO_CANDIDATES:
        candidate = replace(plan, schemes=schemes.resolving_auto(observer))
        model = flow.quantize(ep, candidate, calibration)
        snr = snr_db_of(expected, outputs(model, verify))
        measured[observer] = db(snr)
        if judge is not None:
            snr = snr_db_of(expected, judge(model))
            programs[observer] = db(snr)
        if best is None or snr > best[0]:
            best = (snr, observer, candidate, model)
    assert best is not None
    record: dict[str, Any] = {"chosen": best[1], "snr_db": measured}
    if judge is not None:
        record |= {"judged_by": "program", "program_snr_db": programs}
    return Chosen(best[2], best[3], record)


def _static(plan: flow.Plan) -> bool:
    """Whether any module of the plan is int8-static (has calibrated activations)."""
    return STATIC in (plan.schemes.default, *(o.scheme for o in plan.schemes.overrides))
