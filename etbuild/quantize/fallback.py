"""`accuracy: {fallback: auto}`: keep the layers that cost the most accuracy float, one at a
time, until the recipe's gate holds.

A layer (a quantized op of `LAYER_OPS`, with its fused activation) owns the observers on its
inputs, its weight and its output in the calibrated, observed graph. Running that graph with
only some observers applied as quantize → dequantize (the same ops, with the same parameters,
that convert would insert) measures a choice of float layers without preparing again:

1. rank the layers by the output SNR the model has when that layer alone is quantized
   (lowest first: the layer whose quantization the output feels most);
2. keep layers float in that order until the gate holds on the observed graph;
3. convert with those layers float (`Plan.keep_float`: they lose their weight, input and
   output quantization) and check the gate on the converted graph; while it fails, keep more
   of the ranked layers float (1, 2, 4, … more, then halving back to the fewest that pass).

The gate is measured on the verify samples, as verify measures it on the program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.fx import GraphModule, Interpreter, Node
from torch.utils._pytree import tree_flatten

from etbuild.quantize import flow
from etbuild.quantize.ao import ANNOTATION
from etbuild.quantize.metrics import Outputs, gate_holds, gate_value, snr_db
from etbuild.quantize.quantizer import FUSED_ACTIVATIONS, LAYER_OPS
from etbuild.recipe import AccuracyConfig

qd = torch.ops.quantized_decomposed
_PER_CHANNEL = (torch.per_channel_symmetric, torch.per_channel_affine)


def fake_quantize(observer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`x` through the quantize → dequantize pair that convert makes of `observer`."""
    qmin, qmax, dtype = observer.quant_min, observer.quant_max, observer.dtype
    if getattr(observer, "is_dynamic", False):
        scale, zero = qd.choose_qparams.tensor(x, qmin, qmax, observer.eps, dtype)
        q = qd.quantize_per_tensor.tensor(x, scale, zero, qmin, qmax, dtype)
        return qd.dequantize_per_tensor.tensor(q, scale, zero, qmin, qmax, dtype)
    scale, zero = observer.calculate_qparams()
    if observer.qscheme in _PER_CHANNEL:
        axis = observer.ch_axis
        q = qd.quantize_per_channel(x, scale, zero, axis, qmin, qmax, dtype)
        return qd.dequantize_per_channel(q, scale, zero, axis, qmin, qmax, dtype)
    q = qd.quantize_per_tensor(x, float(scale), int(zero), qmin, qmax, dtype)
    return qd.dequantize_per_tensor(q, float(scale), int(zero), qmin, qmax, dtype)


class _Observed(Interpreter):
    """Runs an observed graph applying only the `active` observers (the others pass values through)."""

    def __init__(self, gm: GraphModule, active: frozenset[str]) -> None:
        super().__init__(gm)
        self.active = active

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        if str(target).startswith("activation_post_process"):
            return fake_quantize(self.fetch_attr(target), args[0]) if target in self.active else args[0]
        return super().call_module(target, args, kwargs)


@dataclass(frozen=True)
class ObservedLayer:
    """A layer of an observed graph: its node, fused activation (if any) and observers."""

    node: str
    fused: str | None
    observers: frozenset[str]


def observed_layers(gm: GraphModule) -> list[ObservedLayer]:
    """The annotated layers of an observed graph with the observers they own."""
    layers = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in LAYER_OPS or ANNOTATION not in node.meta:
            continue
        users = list(node.users)
        fused = users[0] if len(users) == 1 and users[0].target in FUSED_ACTIVATIONS else None
        end = fused or node
        around = [a for a in node.args if isinstance(a, Node)] + list(end.users)
        owned = frozenset(str(n.target) for n in around if n.op == "call_module" and _is_observer(n))
        if owned:
            layers.append(ObservedLayer(node.name, fused.name if fused else None, owned))
    return layers


def _is_observer(node: Node) -> bool:
    return str(node.target).startswith("activation_post_process")


@dataclass(frozen=True)
class Fallback:
    """The plan that meets the gate, its converted graph, the layers it keeps float (in order)
    and the gate's value."""

    plan: flow.Plan
    model: GraphModule
    kept: tuple[str, ...]
    value: float


def _outputs(run: Callable[..., Any], samples: Sequence[tuple[Any, ...]]) -> Outputs:
    with torch.no_grad():
        return [tree_flatten(run(*s))[0] for s in samples]


@dataclass(frozen=True)
class Inputs:
    """The samples a fallback calibrates on and the ones it measures the gate on."""

    calibration: Sequence[tuple[Any, ...]]
    evaluation: Sequence[tuple[Any, ...]]


def fall_back(ep: Any, plan: flow.Plan, observed: GraphModule, gate: AccuracyConfig, inputs: Inputs) -> Fallback:
    """The plan with the fewest layers kept float (in sensitivity order) whose conversion meets the gate."""
    samples = inputs.evaluation
    reference = _outputs(flow.float_reference(ep), samples)

    def observed_outputs(active: frozenset[str]) -> Outputs:
        return _outputs(_Observed(observed, active).run, samples)

    layers = observed_layers(observed)
    alone = {layer.node: snr_db_of(reference, observed_outputs(layer.observers)) for layer in layers}
    ranked = sorted(layers, key=lambda layer: alone[layer.node])
    count, active = 0, frozenset(o for layer in layers for o in layer.observers)
    while count < len(ranked) and not gate_holds(gate, gate_value(gate, reference, observed_outputs(active))):
        active -= ranked[count].observers
        count += 1

    def attempt(k: int) -> Fallback:
        kept = ranked[:k]
        names = frozenset(n for layer in kept for n in (layer.node, layer.fused) if n)
        candidate = replace(plan, choices=replace(plan.choices, keep_float=plan.keep_float | names))
        model = flow.quantize(ep, candidate, inputs.calibration)
        value = gate_value(gate, reference, _outputs(model, samples))
        return Fallback(candidate, model, tuple(layer.node for layer in kept), value)

    return _first_passing(attempt, count, len(ranked), lambda f: gate_holds(gate, f.value))


def _first_passing(
    attempt: Callable[[int], Fallback], start: int, end: int, ok: Callable[[Fallback], bool]
) -> Fallback:
    """The attempt with the smallest k in [start, end] that is ok (end when none is), searching
    upward from `start` in doubling steps, then halving back: ok is taken to be monotonic in k."""
    failed, step, k = start - 1, 1, start
    found = attempt(k)
    while not ok(found) and k < end:
        failed, k = k, min(end, k + step)
        step *= 2
        found = attempt(k)
    while k - failed > 1 and ok(found):
        middle = (failed + k) // 2
        trial = attempt(middle)
        if ok(trial):
            found, k = trial, middle
        else:
            failed = middle
    return found


def snr_db_of(reference: Outputs, quantized: Outputs) -> float:
    """The SNR over every float output of every sample."""
    pairs = [(r, q) for rs, qs in zip(reference, quantized) for r, q in zip(rs, qs) if r.is_floating_point()]
    return snr_db([r for r, _ in pairs], [q for _, q in pairs])
