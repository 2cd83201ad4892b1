"""`verify.fallback: auto`: keep a language model's worst quantized layers float until its agreement holds.

Measured on the converted model in torch, teacher-forced over the search's own sequence
(`etbuild.llm.agreement.search_sequence`: another seed than verify's, so the choice is not fitted to the
sequence that judges it), the KV cache put back (`flow.restore_state`) before and after every evaluation:

1. uniform: the recipe's scheme as converted; if its agreement reaches `verify.agreement` + `MARGIN`, nothing
   is kept float;
2. sensitivity: each quantized layer (linears; the embedding table and the output head when quantized) run
   float alone (`etbuild.llm.swap`: the same graph reading the float weight, which is what converting again
   with it kept float computes) over the sequence's first `RANK_POSITIONS` positions, ranked by the logits'
   SNR it gives, highest first (agreement over a few hundred positions moves in steps of one position, so it
   breaks few ties; SNR separates every layer);
3. the fewest of the ranked layers kept float that reach the target: 1, 2, 4, … then halving back
   (`etbuild.quantize.fallback.fewest`, the search `quantize.accuracy.fallback` runs too, judged here by the
   agreement with those layers swapped float);
4. the plan with them in `Plan.keep_float` converted again (GPTQ still compensates the int4 linears that
   stay) and measured; if it misses the target, more layers are kept (`fewest` again, judged converted).

Under `int8-static` the swap leaves each layer's output quantized, so it says little about keeping the
layer float (the activations' error stays): there step 3 converts again for every count it tries, which
costs a calibration each. The ranking is still the swap's.

Every evaluation is a log line (`logging`, this module's logger) and a step in the record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node

from etbuild.llm.agreement import agreement, float_model, one_token_calls, search_sequence, teacher_forced, threshold
from etbuild.llm.swap import Layer, quantized_layers, swappable
from etbuild.model import build_model
from etbuild.quantize import flow
from etbuild.quantize.fallback.fewest import Judge, fewest
from etbuild.quantize.modules import module_path
from etbuild.recipe import Recipe

MARGIN = 0.02
"""What the search aims above `verify.agreement` on its own sequence (about 2.5 of 128 positions): verify
measures another sequence, in the program's runtime."""
RANK_POSITIONS = 32
"""The ranking runs each layer float over the first this many positions of the search's sequence, a quarter of
the 128 the steps and the final plan are measured over: it takes one evaluation per quantized layer, the bulk of
the search's cost."""
WORST_SHOWN = 3
"""How many of the layers that cost the most a failure names."""
STATIC_NOTE = ("; under int8-static the other calls whose activations it quantizes (residual adds, the norms' and "
               "RoPE's multiplies) stay int8 whichever layers are kept float")
LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """The plan chosen, its converted model, the nodes it keeps float, whether it reaches the target,
    and the search's record for `layers.json`."""

    plan: flow.Plan
    model: GraphModule
    kept: tuple[str, ...]
    passed: bool
    record: dict[str, Any]


class Evaluation:
    """Agreement measurements of converted models of one method on the search's sequence."""

    def __init__(self, recipe: Recipe, ep: ExportedProgram) -> None:
        self.ep = ep
        self.samples = one_token_calls(search_sequence(recipe))
        self.reference = teacher_forced(float_model(build_model(recipe)), self.samples)
        self.count = 0

    def measure(self, model: GraphModule, what: str, positions: int | None = None) -> dict[str, Any]:
        """Agreement and SNR of `model` against the float model over the sequence's first `positions` positions
        (default: all); its buffers as exported before and after."""
        flow.restore_state(model, self.ep)
        try:
            result = agreement(teacher_forced(model, self.samples[:positions]), self.reference[:positions])
        finally:
            flow.restore_state(model, self.ep)
        self.count += 1
        LOG.info("agreement search %d (%s): agreement %s, %s dB", self.count, what, result["agreement"],
                 result["snr_db"])
        return {"agreement": result["agreement"], "snr_db": _finite(result["snr_db"])}


def agreement_search(recipe: Recipe, ep: ExportedProgram, plan: flow.Plan, model: GraphModule,
              calibration: Sequence[Any]) -> Found:
    """Keep the fewest, most sensitive layers of `model` (converted under `plan`) float that bring its
    agreement to `verify.agreement` + `MARGIN`; `calibration` converts the final plan again."""
    gate = threshold(recipe)
    target = min(1.0, gate + MARGIN)
    evaluation = Evaluation(recipe, ep)
    uniform = evaluation.measure(model, "uniform")
    record: dict[str, Any] = {"threshold": gate, "target": round(target, 4),
                              "positions": len(evaluation.samples),
                              "rank_positions": min(RANK_POSITIONS, len(evaluation.samples)), "uniform": uniform}
    if uniform["agreement"] >= target:
        return Found(plan, model, (), True, {**record, "kept_float": [], "final": uniform, "passed": True,
                                              "evaluations": evaluation.count})
    layers = quantized_layers(model, flow.captured(ep))
    steps: list[dict[str, Any]] = []
    holds = _holds(target)
    with swappable(model, layers) as swapper:
        def alone(layer: Layer) -> dict[str, Any]:
            swapper.keep({layer.node})
            return evaluation.measure(model, f"{layer.node} float", RANK_POSITIONS)

        ranked = sorted(((layer, alone(layer)) for layer in layers), key=lambda item: -_snr(item[1]))
        order = [layer.node for layer, _ in ranked]

        def kept(nodes: Sequence[str]) -> dict[str, Any]:
            swapper.keep(set(nodes))
            steps.append({"kept": len(nodes), **evaluation.measure(model, f"{len(nodes)} kept float")})
            return steps[-1]

        # under int8-static the swap leaves each layer's output quantized: only converting again tells
        by_conversion = plan.static and bool(order)
        if by_conversion:
            chosen = {"kept": 1}
        elif order:
            chosen = fewest(order, Judge(kept, holds), start=1)[1]
        else:
            chosen = {"kept": 0, **uniform}
    nodes = {n.name: n for n in model.graph.nodes}
    record.update(sensitivity=[_layer_record(nodes[layer.node], layer, measured, plan) for layer, measured in ranked],
                  steps=steps, static=plan.static)
    if not by_conversion and not holds(chosen):
        best = max(steps, key=lambda s: s["agreement"], default=uniform)
        return Found(plan, model, (), False, {**record, "kept_float": [], "final": uniform, "passed": False,
                                               "best": best, "evaluations": evaluation.count})
    return _final(ep, plan, calibration, evaluation, order, chosen["kept"], holds, record)


def _final(ep: ExportedProgram, plan: flow.Plan, calibration: Sequence[Any], evaluation: Evaluation,
           order: list[str], count: int, holds: Callable[[dict[str, Any]], bool], record: dict[str, Any]) -> Found:
    """Convert with the first `count` layers of `order` kept float (more while the target is missed)."""
    def converted(nodes: Sequence[str]) -> tuple[flow.Plan, GraphModule, dict[str, Any]]:
        chosen = keep_float(plan, nodes)
        model = flow.quantize(ep, chosen, calibration)
        measured = {"kept": len(nodes), **evaluation.measure(model, f"converted, {len(nodes)} kept float")}
        record["steps"].append({**measured, "converted": True})
        return chosen, model, measured

    final_plan, model, final = fewest(order, Judge(converted, lambda found: holds(found[2])), count)[1]
    kept = tuple(node for node in order if node in final_plan.keep_float and node not in plan.keep_float)
    passed = holds(final)
    record.update(kept_float=list(kept), final=final, passed=passed, evaluations=evaluation.count)
    if not passed:
        record["best"] = max(record["steps"], key=lambda step: step["agreement"])
    return Found(final_plan, model, kept, passed, record)


def _holds(target: float) -> Callable[[dict[str, Any]], bool]:
    return lambda step: bool(step["agreement"] >= target)


def keep_float(plan: flow.Plan, nodes: Sequence[str]) -> flow.Plan:
    """`plan` with `nodes` kept float too."""
    return replace(plan, choices=replace(plan.choices, keep_float=plan.keep_float | frozenset(nodes)))


def failure(record: dict[str, Any]) -> str:
    """What a search that missed says: the best agreement it reached and the layers that cost the most."""
    worst = ", ".join(f"{s['module']} ({s['node']}: {s['agreement']})"
                      for s in record.get("sensitivity", [])[:WORST_SHOWN]) or "none quantized"
    best = record["best"]
    return (f"next-token agreement with the float model reaches at best {best['agreement']} over "
            f"{record['positions']} positions of the search's sequence ({_layers(best.get('kept', 0))} kept float), "
            f"below its target {record['target']} (verify.agreement {record['threshold']} plus {MARGIN}, at most 1); "
            f"the layers that cost the most (agreement with each alone float, over the first "
            f"{record['rank_positions']} positions): {worst}" + (STATIC_NOTE if record.get("static") else ""))


def _layer_record(node: Node, layer: Layer, measured: dict[str, Any], plan: flow.Plan) -> dict[str, Any]:
    return {"node": layer.node, "module": module_path(node) or "<root>", "op": str(node.target).removeprefix("aten."),
            "precision": layer.precision, "bytes_added": layer.bytes_added(plan.per_channel, plan.group_size),
            **measured}


def _layers(count: int) -> str:
    return f"{count} layer" if count == 1 else f"{count} layers"


def _snr(measured: dict[str, Any]) -> float:
    """A measurement's SNR for ranking (exact logits: infinite)."""
    return float("inf") if measured["snr_db"] is None else float(measured["snr_db"])


def _finite(value: float) -> float | None:
    """An SNR for JSON (None: the logits were exact)."""
    return None if not np.isfinite(value) else float(value)
