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

With bias correction on (`quantize.calibration.bias_correction`), each candidate is measured with
its corrected biases and with the original ones (`minmax uncorrected`), the same calibration both
ways, and the best of the four is kept: the correction lifts most of the tier's CNNs by 1–5 dB
but cost mobilevit a decibel (docs/quantization.md).

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
from etbuild.quantize.schemes import AUTO_CANDIDATES, MINMAX

UNCORRECTED = " uncorrected"
"""The suffix of a candidate measured with its bias corrections undone."""


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
    if not plan.static:
        resolved = replace(plan, schemes=schemes.resolving_auto(MINMAX))
        return Chosen(resolved, flow.quantize(ep, resolved, calibration), None)
    expected = outputs(reference, verify)
    best: tuple[float, str, bool, flow.Plan, GraphModule] | None = None
    measured: dict[str, float | None] = {}
    programs: dict[str, float | None] = {}
    for observer in AUTO_CANDIDATES:
        candidate = replace(plan, schemes=schemes.resolving_auto(observer))
        model = flow.quantize(ep, candidate, calibration)
        corrections = flow.corrections(model)
        for corrected in (True, False) if corrections is not None and corrections.records else (None,):
            name = observer if corrected in (True, None) else f"{observer}{UNCORRECTED}"
            if corrections is not None and corrected is not None:
                corrections.use(model, corrected)
            snr = snr_db_of(expected, outputs(model, verify))
            measured[name] = db(snr)
            if judge is not None:
                snr = snr_db_of(expected, judge(model))
                programs[name] = db(snr)
            if best is None or snr > best[0]:
                best = (snr, observer, corrected is not False, candidate, model)
    assert best is not None
    _, observer, corrected, chosen_plan, model = best
    corrections = flow.corrections(model)
    if corrections is not None:
        corrections.use(model, corrected)
    record: dict[str, Any] = {"chosen": observer, "snr_db": measured}
    if corrections is not None and corrections.records:
        record["bias_corrected"] = corrected
    if judge is not None:
        record |= {"judged_by": "program", "program_snr_db": programs}
    return Chosen(chosen_plan, model, record)
