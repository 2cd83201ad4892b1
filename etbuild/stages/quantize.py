"""Quantize stage: float ATen methods → quantized ATen methods, by the recipe's `quantize:` section.

Takes: `export/<method>.pt2` (dialect `aten`), the recipe's `model` and `quantize` sections,
the calibration file, and `verify.samples`/`verify.seed` (the samples the accuracy gate is
measured on, the same ones verify uses). Gives: `quantized/<method>.pt2`, still dialect `aten`
but with `quantized_decomposed` quantize/dequantize ops and int8 constant weights (the
standard pt2e q/dq form, see `etbuild.quantize.quantizer`), and `quantized/layers.json`
(schemes per module, per-layer SNR against float, outputs, weight bytes before and after,
the layers kept float, and what the accuracy search chose).

Per method: capture, annotate with etbuild's Quantizer, calibrate, convert (torchao's pt2e),
rewrite int4 linear weights (rounded, or GPTQ on the calibration inputs: `quantize.weights`) and
embedding tables (with `observer: auto`, the calibration whose
program, lowered with the recipe's backends and run in our runtime, is closest to float on the
verify samples: `etbuild.quantize.program_judge`), measure against the float graph on the
verify samples, and, when the gate fails with `accuracy.fallback: auto`, search observers per
layer and then higher precision for the layers with the most accuracy per byte until it holds
(`etbuild.quantize.fallback`). A gate that still fails is a VerificationError naming
the layer that loses the most; `layers.json` is written first. A language model's `forward` with
`verify.fallback: auto` first keeps the layers that cost the most next-token agreement float
(`etbuild.llm.fallback`; `agreement_search` in `layers.json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch.export import ExportedProgram

from etbuild.errors import VerificationError
from etbuild.fsutil import write_json
from etbuild.llm import fallback as llm_fallback
from etbuild.model import dynamic_shapes, example_inputs, sample_inputs
from etbuild.quantize import auto, fallback, flow, report
from etbuild.quantize.accuracy import compare
from etbuild.quantize.calibration import calibration_inputs
from etbuild.quantize.checks import worst_layer
from etbuild.quantize.metrics import db, gate_holds, gate_value
from etbuild.quantize.modules import MODULE_STACK, SchemeMap, graph_modules, unmatched_glob
from etbuild.quantize.program_judge import Compile, ProgramJudge
from etbuild.quantize.schemes import requested_mode
from etbuild.recipe import QuantizeConfig, Recipe
from etbuild.recipe.kinds import kind_of
from etbuild.stages import handoff

METHOD_MODULE = "etbuild.stages.export.MethodModule"
"""The wrapper export puts around a method other than forward; its model sits at `model.`."""


def run_quantize(recipe: Recipe, exports: Mapping[str, Path], outs: Mapping[str, Path], layers_json: Path,
                 compile_program: Compile | None = None) -> None:
    """Quantize every method, save each `.pt2` atomically, write `layers.json`.

    compile_program: what `observer: auto` compiles its candidates with (the build passes
    `etbuild.pipeline.program_bytes`); without it, candidates are judged by their converted models."""
    cfg = _config(recipe)
    methods = {name: _model_relative(handoff.load(path)) for name, path in exports.items()}
    _check_globs(recipe, cfg, methods)
    schemes = SchemeMap(cfg.scheme, cfg.modules, cfg.calibration.observer)
    results = {name: quantize_method(recipe, name, ep, schemes, compile_program) for name, ep in methods.items()}
    write_json(layers_json, {**_settings(cfg), "methods": {name: r.record for name, r in results.items()}})
    searches = (r.record.get("agreement_search") for r in results.values())
    missed = [search for search in searches if search is not None and not search["passed"]]
    if missed:
        raise VerificationError(f"{recipe.where('verify.fallback')}: verify.fallback: auto: "
                                f"{llm_fallback.failure(missed[0])} (see {layers_json})")
    failed = [(name, r) for name, r in results.items() if not r.record["gate"]["passed"]]
    if failed:
        raise VerificationError(_gate_message(recipe, cfg, failed, layers_json))
    for name, out in outs.items():
        handoff.write(results[name].exported, out)


class MethodResult:
    """One quantized method: its re-exported program and its report record."""

    def __init__(self, exported: ExportedProgram | None, record: dict[str, Any]) -> None:
        self.exported, self.record = exported, record


def quantize_method(recipe: Recipe, method: str, ep: ExportedProgram, schemes: SchemeMap,
                    compile_program: Compile | None = None) -> MethodResult:
    """Quantize one method and measure it on the verify samples."""
    cfg = _config(recipe)
    plan = flow.Plan(schemes, cfg.per_channel, cfg.group_size, cfg.embeddings,
                     bias_correction=cfg.calibration.bias_correction, weights=cfg.weights,
                     mode=requested_mode(recipe.backends))
    inputs = fallback.Inputs(calibration_inputs(recipe, method),
                             sample_inputs(recipe, recipe.verify.samples, recipe.verify.seed, method))
    gate = cfg.accuracy
    reference = flow.float_reference(ep)
    chosen = auto.quantize(ep, plan, inputs.calibration, inputs.evaluation, reference,
                           _judge(recipe, method, ep, inputs.evaluation, compile_program))
    plan, model, kept, search = chosen.plan, chosen.model, (), None
    sequence_search = _agreement_search(recipe, ep, plan, model, inputs.calibration)
    if sequence_search is not None:
        plan, model, kept = sequence_search.plan, sequence_search.model, sequence_search.kept
    comparison = compare(reference, model, inputs.evaluation)
    value = _gate_value(gate, comparison)
    if gate is not None and gate.fallback == "auto" and not gate_holds(gate, value):
        uniform = _totals(gate, value, comparison, model)
        found = fallback.fall_back(ep, plan, gate, inputs)
        plan, model, kept = found.plan, found.model, found.kept
        comparison = compare(reference, model, inputs.evaluation)
        value = _gate_value(gate, comparison)
        search = {"uniform": uniform, **found.record, "final": _totals(gate, value, comparison, model)}
    record = _record(plan, reference, model, comparison, kept)
    if chosen.record is not None:
        record["observer"] = chosen.record
    corrections = flow.corrections(model)
    if corrections is not None and corrections.applied and corrections.records:
        record["bias_correction"] = corrections.records
    if search is not None:
        record["search"] = search
    if sequence_search is not None:
        record["agreement_search"] = sequence_search.record
    record["gate"] = {"value": _shown(gate, value), "passed": gate is None or gate_holds(gate, value)}
    flow.restore_state(model, ep)
    exported = flow.reexport(model, example_inputs(recipe, method), dynamic_shapes(recipe, method))
    return MethodResult(exported, record)


def _agreement_search(recipe: Recipe, ep: ExportedProgram, plan: flow.Plan, model: Any,
                      calibration: Any) -> llm_fallback.Found | None:
    """`verify.fallback: auto` on a language model's method with a KV cache: the layers it keeps float."""
    kind = kind_of(recipe)
    if kind.search is None or not kind.searches(recipe) or not flow.mutated_buffers(ep):
        return None
    found: llm_fallback.Found = kind.search(recipe, ep, plan, model, calibration)
    return found


def _judge(recipe: Recipe, method: str, ep: ExportedProgram, samples: Any,
           compile_program: Compile | None) -> ProgramJudge | None:
    """What `observer: auto` measures candidates by: their programs, lowered with the recipe's backends
    (None, their converted models, for a method with state, which running the samples would change, or
    without a compiler)."""
    if flow.mutated_buffers(ep) or compile_program is None:
        return None
    return ProgramJudge(method, example_inputs(recipe, method), dynamic_shapes(recipe, method), recipe.backends,
                        samples, compile_program)


def _config(recipe: Recipe) -> QuantizeConfig:
    if recipe.quantize is None:
        raise recipe.error("quantize", "the quantize stage needs a quantize section")
    return recipe.quantize


def _totals(gate: Any, value: float, comparison: Any, model: Any) -> dict[str, Any]:
    """The search report's summary of a converted model: gate value, output SNR, weight bytes."""
    return {"gate_value": _shown(gate, value), "snr_db": db(fallback.snr_db_of(comparison.reference,
            comparison.quantized)), "weight_bytes": report.constant_bytes(model)}


def _shown(gate: Any, value: float) -> float | None:
    """A gate's value for the report: top-1 agreement as is, an SNR in dB rounded (None: exact)."""
    return value if gate is None or gate.top1_agreement is not None else db(value)


def _gate_value(gate: Any, comparison: Any) -> float:
    if gate is None:
        return float("nan")
    return gate_value(gate, comparison.reference, comparison.quantized)


def _record(plan: flow.Plan, reference: Any, model: Any, comparison: Any, kept: tuple[str, ...]) -> dict[str, Any]:
    by_name = {n.name: n for n in reference.graph.nodes}
    return {
        "modules": report.module_schemes(reference.graph.nodes, plan),
        "layers": [report.layer_record(layer, plan.scheme_of(by_name[layer.node])) for layer in comparison.layers],
        "outputs": report.output_records(comparison),
        "kept_float": [{"node": n, "module": report.module_path(by_name[n]) or "<root>",
                        "op": str(by_name[n].target).removeprefix("aten.")} for n in kept],
        "weight_bytes": {"float": report.constant_bytes(reference), "quantized": report.constant_bytes(model)},
    }


def _settings(cfg: QuantizeConfig) -> dict[str, Any]:
    accuracy = cfg.accuracy
    gate = None if accuracy is None else {
        k: v for k, v in (("min_snr_db", accuracy.min_snr_db), ("top1_agreement", accuracy.top1_agreement),
                          ("fallback", accuracy.fallback)) if v is not None}
    return {"scheme": cfg.scheme, "per_channel": cfg.per_channel, "group_size": cfg.group_size,
            "embeddings": cfg.embeddings, "weights": cfg.weights, "accuracy": gate,
            "observer": cfg.calibration.observer, "bias_correction": cfg.calibration.bias_correction,
            "overrides": [{k: v for k, v in (("module", o.module), ("scheme", o.scheme), ("observer", o.observer))
                           if v is not None} for o in cfg.modules]}


def _gate_message(recipe: Recipe, cfg: QuantizeConfig, failed: list[tuple[str, MethodResult]], out: Path) -> str:
    gate = cfg.accuracy
    top1 = gate.top1_agreement is not None
    want = f"top1_agreement {gate.top1_agreement}" if top1 else f"min_snr_db {gate.min_snr_db}"
    parts = [f"method {method} reaches {result.record['gate']['value']}{worst_layer(result.record['layers'])}"
             for method, result in failed]
    hint = "" if gate.fallback == "auto" else (
        "; accuracy.fallback: auto searches observers per layer, then keeps layers at higher precision")
    return (f"{recipe.where('quantize.accuracy')}: quantize.accuracy: {want} fails on the {recipe.verify.samples} "
            f"verify samples against the float model: {'; '.join(parts)}{hint} (see {out})")


def _check_globs(recipe: Recipe, cfg: QuantizeConfig, methods: Mapping[str, ExportedProgram]) -> None:
    """Every `quantize.modules` glob matches a module of some method."""
    found = unmatched_glob(cfg.modules, graph_modules(ep.graph for ep in methods.values()))
    if found is not None:
        glob, message = found
        raise recipe.error(("quantize", "modules", glob), message)


def _model_relative(ep: ExportedProgram) -> ExportedProgram:
    """Module paths relative to the model: export wraps a method other than forward in a
    MethodModule, which prefixes every path with `model.`."""
    for node in ep.graph.nodes:
        stack = node.meta.get(MODULE_STACK)
        if stack and list(stack.values())[0][1] == METHOD_MODULE:
            node.meta[MODULE_STACK] = {
                key: (path.removeprefix("model."), kind) for key, (path, kind) in list(stack.items())[1:]
            }
    return ep
