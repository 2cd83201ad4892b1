"""One method through torchao's pt2e flow, with our policy: capture → prepare → calibrate →
convert → weight rewrites → re-export.

`Plan` says what to quantize; `quantize(ep, plan, samples)` gives the converted GraphModule
(fake-quantized: it computes what the program will; with `plan.weights` gptq, its int4 linears' rounding
compensated on the same samples; with `plan.bias_correction`, its int8-static
layers' biases corrected on the same samples, the record in `corrections(model)`), and `reexport` turns it back into an
ExportedProgram for the lower stage. `float_reference(ep)` is the same capture with the
conv/BatchNorm folding prepare applies and nothing quantized: the float graph the report
compares with, node for node.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node

from etbuild.quantize import bias_correction, gptq, weights
from etbuild.quantize.ao import convert_pt2e, prepare_pt2e
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.quantizer import Choices, EtbuildQuantizer
from etbuild.quantize.schemes import DEFAULT_MODE, DYNAMIC, FLOAT, INT4, MODES, STATIC, Mode

EMBEDDING_BITS = {"int8": 8, "int4": 4}
ROUNDED, GPTQ = "rounded", "gptq"
WEIGHTS = (ROUNDED, GPTQ)
"""How int4 linear weights are quantized: each group's values rounded to the nearest level (scales by a
clipping search), or GPTQ (`etbuild.quantize.gptq`: rounding errors compensated on the calibration inputs)."""
HESSIANS = "etbuild_gptq_hessians"


@dataclass(frozen=True)
class Plan:
    """What to quantize: schemes per node, weights per channel or not, int4 group size, embedding
    tables (None, `int8`, `int4`), what the accuracy search chose per node (`choices`), and the
    quantizer mode the recipe's backends ask for (`mode`: int32 biases for an NPU)."""

    schemes: SchemeMap
    per_channel: bool = True
    group_size: int = 32
    embeddings: str | None = None
    choices: Choices = field(default_factory=Choices)
    bias_correction: bool = False
    weights: str = ROUNDED
    mode: Mode = MODES[DEFAULT_MODE]

    @property
    def keep_float(self) -> frozenset[str]:
        return self.choices.keep_float

    @property
    def static(self) -> bool:
        """Whether any module of the plan is int8-static (has calibrated activations)."""
        return STATIC in (self.schemes.default, *(o.scheme for o in self.schemes.overrides))

    def quantizer(self) -> EtbuildQuantizer:
        return EtbuildQuantizer(self.schemes, self.per_channel, self.choices, self.mode)

    def scheme_of(self, node: Node) -> str:
        """The scheme of `node` before the quantizer's own choices (`float` when kept float)."""
        return self.choices.scheme_of(node, self.schemes)


def captured(ep: ExportedProgram) -> GraphModule:
    """A fresh GraphModule of the exported method (prepare and convert edit theirs in place)."""
    return copy.deepcopy(ep).module()


def float_reference(ep: ExportedProgram) -> GraphModule:
    """The captured graph with conv/BatchNorm folded and nothing quantized."""
    return prepare_pt2e(captured(ep), EtbuildQuantizer(SchemeMap(FLOAT), per_channel=True))


def prepared(ep: ExportedProgram, plan: Plan, samples: Sequence[tuple[Any, ...]],
             float_means: bias_correction.ChannelMeans | None = None) -> GraphModule:
    """The annotated, observed graph after running `samples` through it (adding the float outputs
    of the layers bias correction reads to `float_means`, when given; with `plan.weights` gptq,
    recording the inputs of its int4 linears, for `converted`)."""
    model = prepare_pt2e(captured(ep), plan.quantizer())
    wanted = (lambda n: _int4(plan, n)) if plan.weights == GPTQ else (lambda n: False)
    with gptq.recording(model, wanted) as hessians, torch.no_grad():
        for sample in samples:
            if float_means is None:
                model(*sample)
            else:
                bias_correction.MeanRecorder(model, float_means).run(*sample)
    if hessians.inputs:
        model.meta[HESSIANS] = hessians
    return model


def converted(observed: GraphModule, plan: Plan) -> GraphModule:
    """The quantized graph of an observed one, which it consumes: convert works in place, and
    a deep copy would not do (the copy's annotations still name the original's nodes)."""
    hessians = observed.meta.pop(HESSIANS, None)
    model = convert_pt2e(observed)
    quantizer = gptq.quantizer(hessians) if hessians is not None else None
    weights.int4_linears(model, lambda n: plan.scheme_of(n) == INT4, plan.group_size, quantizer)
    weights.per_token_inputs(model, lambda n: plan.schemes.scheme_of(n) == INT4 and plan.scheme_of(n) == DYNAMIC)
    if plan.embeddings is not None:
        bits = EMBEDDING_BITS[plan.embeddings]
        weights.embeddings(model, bits, lambda n: plan.scheme_of(n) != FLOAT, plan.group_size)
    weights.drop_unused_constants(model)
    return model


def _int4(plan: Plan, node: Node) -> bool:
    """Whether `node` is a linear the plan gives int4 weights."""
    return node.op == "call_function" and node.target is torch.ops.aten.linear.default and plan.scheme_of(node) == INT4


CORRECTIONS = "etbuild_bias_corrections"
"""The key of a converted model's `meta` holding its bias corrections' records."""


def quantize(ep: ExportedProgram, plan: Plan, samples: Sequence[tuple[Any, ...]]) -> GraphModule:
    """The converted graph of `ep` under `plan`, calibrated (and, with `plan.bias_correction`,
    its biases corrected) on `samples`. A method that writes its state is not corrected: the
    samples run side by side there, and their writes would interleave."""
    if not plan.bias_correction or mutated_buffers(ep):
        return converted(prepared(ep, plan, samples), plan)
    float_means = bias_correction.ChannelMeans.empty()
    model = converted(prepared(ep, plan, samples, float_means), plan)
    model.meta[CORRECTIONS] = bias_correction.correct(model, float_means, samples)
    return model


def corrections(model: GraphModule) -> bias_correction.Corrections | None:
    """The bias corrections `quantize` made to `model` (None: it was not asked to make any)."""
    return model.meta.get(CORRECTIONS)


def restore_state(model: GraphModule, ep: ExportedProgram) -> None:
    """Put back the exported initial value of every buffer the method writes: calibration and the
    measurements ran `model`, which wrote them (a KV cache would ship holding calibration tokens)."""
    with torch.no_grad():
        for name in mutated_buffers(ep):
            initial = ep.state_dict[name] if name in ep.state_dict else ep.constants.get(name)
            try:
                buffer = model.get_buffer(name)
            except AttributeError:
                continue  # not a buffer of the converted module: nothing ran into it
            if initial is not None and buffer.shape == initial.shape and buffer.dtype == initial.dtype:
                buffer.copy_(initial)


def mutated_buffers(ep: ExportedProgram) -> set[str]:
    """The buffers a method writes: those its signature names, and those an in-place call writes
    (export's default IR keeps `add_`, `copy_`, `llama::update_cache` on the buffer itself)."""
    signature = ep.graph_signature
    names = set(signature.buffers_to_mutate.values())
    for node in ep.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for arg, spec in zip(node.args, schema.arguments):
            written = spec.alias_info is not None and spec.alias_info.is_write
            if written and isinstance(arg, torch.fx.Node) and arg.name in signature.inputs_to_buffers:
                names.add(signature.inputs_to_buffers[arg.name])
    return names


def reexport(model: GraphModule, inputs: tuple[Any, ...], dynamic_shapes: Any) -> ExportedProgram:
    """The converted graph exported again, as the lower stage reads methods."""
    return torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes, strict=False)
