"""The search behind `accuracy: {fallback: auto}`: meet the gate at the smallest size.

On the calibrated, observed graph (`graph.py`: fake-quantized runs, no convert), with the
recipe's scheme as the start:

1. observers (static schemes): the layers, most sensitive first (lowest output SNR with that
   layer alone quantized), each try the four observers for the static activations they own
   (`OBSERVERS`, each calibrated once on the whole graph) and keep the one giving the best
   output SNR, given the choices before;
2. precision, if the gate still fails: each layer's next step up (int4 → int8 for the linears
   the scheme makes int4, int8 → float) is measured alone, the steps are ordered by dB gained
   per weight byte added (`precision.py`), and applied in that order, one at a time, until the
   gate holds (`fewest.fewest`, judged by the gate on the observed graph);
3. convert with those choices and check the gate on the converted graph; while it fails, apply
   more of the ordered steps (1, 2, 4, … more, then halving back to the fewest that pass:
   `fewest.fewest` again, judged by the gate on the converted graph).

For comparison it also finds what keeping layers float alone would cost (the former fallback:
layers float in sensitivity order until the gate holds on the observed graph, a lower bound
of what it needs once converted). Gates are measured on the verify samples.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from etbuild.quantize import flow
from etbuild.quantize.fallback import precision
from etbuild.quantize.fallback.fewest import Judge, fewest
from etbuild.quantize.fallback.graph import (
    Observed,
    ObservedLayer,
    State,
    activation_observers,
    active_observers,
    observed_layers,
    outputs,
    snr_db_of,
    unobserved,
    watches,
)
from etbuild.quantize.fallback.precision import FLOAT, INT4, INT8
from etbuild.quantize.metrics import Outputs, db, gate_holds, gate_value
from etbuild.quantize.modules import SchemeMap, module_path
from etbuild.quantize.quantizer import WEIGHTED, Choices
from etbuild.quantize.report import constant_bytes
from etbuild.quantize.schemes import DYNAMIC, OBSERVERS
from etbuild.quantize.schemes import INT4 as INT4_SCHEME
from etbuild.recipe import AccuracyConfig

_MIN_GAIN_DB = 0.01
"""An observer replaces the one before only when the output gains at least this much."""


@dataclass(frozen=True)
class Inputs:
    """The samples a fallback calibrates on and the ones it measures the gate on."""

    calibration: Any
    evaluation: Any


@dataclass(frozen=True)
class Setting:
    """A choice to measure: observer per static activation (value name → observer) and
    precision per layer (node → int4, int8, float)."""

    observers: dict[str, str] = field(default_factory=dict)
    precision: dict[str, str] = field(default_factory=dict)

    def with_precision(self, node: str, value: str) -> Setting:
        return Setting(self.observers, {**self.precision, node: value})


class Search:
    """One method's search state: the observed graphs, its layers, and measurements."""

    def __init__(self, ep: ExportedProgram, plan: flow.Plan, gate: AccuracyConfig, inputs: Inputs) -> None:
        self.ep, self.plan, self.gate, self.inputs = ep, plan, gate, inputs
        self.reference = outputs(flow.float_reference(ep), inputs.evaluation)
        self.int4 = _int4_linears(ep, plan)
        self.base_plan = replace(plan, choices=replace(plan.choices, schemes={
            **plan.choices.schemes, **dict.fromkeys(self.int4, DYNAMIC)}))
        self.graph = flow.prepared(ep, self.base_plan, inputs.calibration)
        self.layers = observed_layers(self.graph)
        self.by_node = {layer.node: layer for layer in self.layers}
        self.layer_nodes = frozenset(n for layer in self.layers for n in layer.nodes)
        self.watched = watches(self.graph)
        self.start = Setting({}, {lay.node: INT4 if lay.node in self.int4 else INT8 for lay in self.layers})
        self.modules = {value: name for layer in self.layers for value, name in layer.activations.items()}
        self.calibrated: dict[str, dict[str, torch.nn.Module]] = {}
        self.cache: dict[str, torch.Tensor] = {}

    def outputs(self, setting: Setting, active: frozenset[str] | None = None) -> Outputs:
        """The observed graph's outputs on the evaluation samples under `setting` (or with only
        the observers `active`)."""
        if active is None:
            floats = {n for node, p in setting.precision.items() if p == FLOAT for n in self.by_node[node].nodes}
            active = active_observers(self.watched, self.layer_nodes, frozenset(floats | self.plan.keep_float))
        swapped = {self.modules[v]: self.calibrated[kind][v] for v, kind in setting.observers.items()}
        bits = {INT4: 4, INT8: 8}
        tokens = {n: bits[p] for n, p in setting.precision.items() if n in self.int4 and p in bits}
        state = State(active, swapped, tokens)
        return outputs(Observed(self.graph, state, self.plan.group_size, self.cache).run, self.inputs.evaluation)

    def snr(self, setting: Setting) -> float:
        return snr_db_of(self.reference, self.outputs(setting))

    def holds(self, setting: Setting) -> bool:
        return gate_holds(self.gate, gate_value(self.gate, self.reference, self.outputs(setting)))

    def calibrate_observers(self) -> None:
        """Calibrate the graph once per observer, for the static activations the layers own."""
        if not self.modules:
            return
        for kind in OBSERVERS:
            schemes = SchemeMap(self.plan.schemes.default, _without_observers(self.plan.schemes), kind)
            observed = flow.prepared(self.ep, replace(self.base_plan, schemes=schemes), self.inputs.calibration)
            self.calibrated[kind] = activation_observers(observed)

    def ranked(self) -> list[ObservedLayer]:
        """The layers by the output SNR with that layer alone quantized, lowest first."""
        floats = {node: FLOAT for node in self.start.precision}
        alone = {}
        for layer in self.layers:
            setting = Setting({}, {**floats, layer.node: self.start.precision[layer.node]})
            alone[layer.node] = snr_db_of(self.reference, self.outputs(setting, layer.observers))
        return sorted(self.layers, key=lambda layer: alone[layer.node])

    def plan_of(self, setting: Setting) -> flow.Plan:
        """The plan that converts to what `setting` measures."""
        kept = {n for node, p in setting.precision.items() if p == FLOAT for n in self.by_node[node].nodes}
        int8 = {node: DYNAMIC for node, p in setting.precision.items() if p == INT8 and node in self.int4}
        choices = Choices(self.plan.keep_float | kept, {**self.plan.choices.schemes, **int8}, dict(setting.observers))
        return replace(self.plan, choices=choices)

    def bytes_of(self, weight: torch.Tensor | None, at: str) -> int:
        return precision.weight_bytes(weight, at, self.plan.per_channel, self.plan.group_size)

    def describe(self, node: str, change: str, bytes_added: int, gained: float) -> dict[str, Any]:
        """One choice for the report: the layer (node, module path, op), the change, its cost and gain."""
        graph_node = next(n for n in self.graph.graph.nodes if n.name == node)
        return {"node": node, "module": module_path(graph_node) or "<root>",
                "op": str(graph_node.target).removeprefix("aten."), "change": change,
                "bytes_added": bytes_added, "gained_db": db(gained)}

    def weight(self, node: str) -> torch.Tensor | None:
        """The constant weight of a layer, if it has one."""
        graph_node = next(n for n in self.graph.graph.nodes if n.name == node)
        source = unobserved(graph_node.args[1]) if len(graph_node.args) > 1 and isinstance(
            graph_node.args[1], Node) else None
        if source is None or source.op != "get_attr" or graph_node.target not in WEIGHTED:
            return None
        return functools.reduce(getattr, str(source.target).split("."), self.graph)


def _int4_linears(ep: ExportedProgram, plan: flow.Plan) -> frozenset[str]:
    """The linears the plan makes int4 (they are observed as int8-dynamic, to measure both)."""
    gm = flow.captured(ep)
    return frozenset(n.name for n in gm.graph.nodes if n.target is torch.ops.aten.linear.default
                     and plan.scheme_of(n) == INT4_SCHEME and isinstance(n.args[1], Node)
                     and n.args[1].op == "get_attr")


def _without_observers(schemes: SchemeMap) -> tuple[Any, ...]:
    return tuple(replace(o, observer=None) for o in schemes.overrides if o.scheme is not None)


@dataclass(frozen=True)
class Fallback:
    """The plan that meets the gate (or the last tried), its converted graph, the layers it keeps
    float, the gate's value, and the search's report."""

    plan: flow.Plan
    model: Any
    kept: tuple[str, ...]
    value: float
    record: dict[str, Any]


def fall_back(ep: ExportedProgram, plan: flow.Plan, gate: AccuracyConfig, inputs: Inputs) -> Fallback:
    """The choices of observers and precision that meet the gate with the fewest bytes added."""
    search = Search(ep, plan, gate, inputs)
    search.calibrate_observers()
    ranked = search.ranked()
    setting, observer_choices = choose_observers(search, ranked)
    steps = ordered_steps(search, setting)

    def observed(chosen: Sequence[precision.Step]) -> tuple[Setting, bool]:
        applied = _applied(setting, chosen)
        return applied, search.holds(applied)

    def converted(chosen: Sequence[precision.Step]) -> tuple[Setting, Any, float]:
        applied = _applied(setting, chosen)
        model = flow.quantize(ep, search.plan_of(applied), inputs.calibration)
        return applied, model, gate_value(gate, search.reference, outputs(model, inputs.evaluation))

    count, _ = fewest(steps, Judge(observed, lambda measured: measured[1]), doubling=False)
    k, (chosen, model, value) = fewest(steps, Judge(converted, lambda measured: gate_holds(gate, measured[2])), count)
    record = {"choices": observer_choices + _step_records(search, setting, steps[:k]),
              "float_fallback": float_fallback(search, ranked)}
    kept = tuple(node for node, p in chosen.precision.items() if p == FLOAT and search.start.precision[node] != FLOAT)
    return Fallback(search.plan_of(chosen), model, kept, value, record)


def shown(gate: AccuracyConfig, value: float) -> float | None:
    """A gate's value for the report: top-1 agreement as is, an SNR in dB rounded (None: exact)."""
    return value if gate.top1_agreement is not None else db(value)


def _apply(setting: Setting, step: precision.Step) -> Setting:
    return setting.with_precision(step.node, step.after)


def _applied(setting: Setting, steps: Sequence[precision.Step]) -> Setting:
    """`setting` with `steps` applied in turn."""
    for step in steps:
        setting = _apply(setting, step)
    return setting


def choose_observers(search: Search, ranked: list[ObservedLayer]) -> tuple[Setting, list[dict[str, Any]]]:
    """Per layer (most sensitive first), the observer of its static activations with the best output SNR."""
    setting, records = search.start, []
    if not search.calibrated:
        return setting, records
    current = search.snr(setting)
    for layer in ranked:
        if not layer.activations:
            continue
        best, best_snr = None, current + _MIN_GAIN_DB
        for kind in OBSERVERS:
            trial = Setting({**setting.observers, **dict.fromkeys(layer.activations, kind)}, setting.precision)
            snr = search.snr(trial)
            if snr > best_snr:
                best, best_snr = (kind, trial), snr
        if best is not None:
            records.append(search.describe(layer.node, f"observer {best[0]}", 0, best_snr - current))
            setting, current = best[1], best_snr
    return setting, records


def ordered_steps(search: Search, setting: Setting) -> list[precision.Step]:
    """Every layer's steps up the ladder from `setting`, each measured alone, most dB per byte first."""
    base = search.snr(setting)
    steps = []
    for layer in search.layers:
        before = setting.precision[layer.node]
        weight = search.weight(layer.node)
        previous = base
        for after in precision.LADDER[precision.LADDER.index(before) + 1:]:
            snr = search.snr(setting.with_precision(layer.node, after))
            added = search.bytes_of(weight, after) - search.bytes_of(weight, before)
            steps.append(precision.Step(layer.node, before, after, added, snr - previous))
            before, previous = after, snr
    return precision.ordered(steps)


def _step_records(search: Search, setting: Setting, steps: list[precision.Step]) -> list[dict[str, Any]]:
    """The applied steps with the dB each gained in turn on the observed graph."""
    records, current = [], search.snr(setting)
    for step in steps:
        setting = _apply(setting, step)
        snr = search.snr(setting)
        records.append(search.describe(step.node, step.change, step.bytes_added, snr - current))
        current = snr
    return records


def float_fallback(search: Search, ranked: list[ObservedLayer]) -> dict[str, Any]:
    """What keeping layers float alone, most sensitive first, takes to meet the gate on the
    observed graph (a lower bound of the float fallback), converted: its weight bytes and gate."""
    setting, added, kept = search.start, 0, []
    for layer in ranked:
        if search.holds(setting):
            break
        weight = search.weight(layer.node)
        added += search.bytes_of(weight, FLOAT) - search.bytes_of(weight, setting.precision[layer.node])
        setting = setting.with_precision(layer.node, FLOAT)
        kept.append(layer.node)
    model = flow.quantize(search.ep, search.plan_of(setting), search.inputs.calibration)
    value = gate_value(search.gate, search.reference, outputs(model, search.inputs.evaluation))
    return {"kept_float": kept, "bytes_added": added, "weight_bytes": constant_bytes(model),
            "gate_value": shown(search.gate, value)}
