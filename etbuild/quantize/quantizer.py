"""etbuild's pt2e Quantizer: annotates a captured ATen graph with the recipe's schemes.

torchao's `prepare_pt2e` reads the annotations this writes; the policy is ours. Per node, the
scheme comes from the `SchemeMap` (the recipe's scheme or a module override) unless the
accuracy search chose one (`Choices`: nodes kept float, int4 linears made int8-dynamic). A
static activation's observer is the one the search chose for that value, else the one the
`SchemeMap` gives the op quantizing it (prepare then lets a value's producer's observer stand
for its consumers' too). What is annotated, by op:

- weighted ops (`linear`, `conv1d`, `conv2d`, depthwise included) with a constant weight: the
  weight (per channel or per tensor), the activation input (static or dynamic), and, for a
  static scheme, the output. A ReLU or hardtanh (ReLU6) that is the op's only user and has
  the same scheme takes the output parameters instead (the fused pattern backends run as one
  quantized op);
- `matmul`, `bmm`, `add`, `mul` (static schemes): every float tensor input and the output,
  with the same fusion;
- ops that do not change the range much (ReLU, pooling, mean, reshapes, permutes, dropout;
  static schemes): input and output share the parameters of their input's producer, which
  must itself be quantized.

The converted graph is the standard pt2e form: `dequantize_per_channel` on int8 constant
weights, `quantize_per_tensor` → `dequantize_per_tensor` pairs on activations (the `.tensor`
forms after `choose_qparams` for dynamic ones), float ops in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import GraphModule, Node

from etbuild.quantize.ao import (
    ANNOTATION,
    QuantizationAnnotation,
    QuantizationSpecBase,
    Quantizer,
    SharedQuantizationSpec,
)
from etbuild.quantize.attention import decompose_attention
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.schemes import (
    DEFAULT_MODE,
    DYNAMIC,
    FLOAT,
    INT4,
    MODES,
    Mode,
    Specs,
    int32_bias,
    specs,
    static_activation,
)

aten = torch.ops.aten

WEIGHTED = frozenset({
    aten.linear.default, aten.conv1d.default, aten.conv2d.default, aten.conv1d.padding, aten.conv2d.padding,
})
CONV1D = frozenset({aten.conv1d.default, aten.conv1d.padding})
ACTIVATION_OPS = frozenset({aten.matmul.default, aten.bmm.default, aten.add.Tensor, aten.mul.Tensor})
FUSED_ACTIVATIONS = frozenset({aten.relu.default, aten.relu_.default, aten.hardtanh.default, aten.hardtanh_.default})
SHARED = frozenset({
    aten.relu.default, aten.relu_.default, aten.hardtanh.default, aten.hardtanh_.default,
    aten.max_pool1d.default, aten.max_pool2d.default, aten.avg_pool1d.default, aten.avg_pool2d.default,
    aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default, aten.mean.dim,
    aten.flatten.using_ints, aten.view.default, aten.reshape.default, aten.permute.default, aten.transpose.int,
    aten.squeeze.dim, aten.unsqueeze.default, aten.dropout.default,
})
TABLE_OPS = frozenset({
    aten.sigmoid.default, aten.sigmoid_.default, aten.tanh.default, aten.tanh_.default, aten.hardswish.default,
    aten.hardswish_.default, aten.hardsigmoid.default, aten.hardsigmoid_.default, aten.gelu.default,
    aten.silu.default, aten.silu_.default, aten.exp.default, aten.elu.default, aten.softmax.int,
    aten.log_softmax.int, aten._softmax.default, aten._log_softmax.default, aten.layer_norm.default,
})
"""Ops quantized on their own input and output in a mode with `tables` (an NPU's lookup tables, softmax,
layer norm)."""
PADS = frozenset({aten.pad.default, aten.constant_pad_nd.default, aten.select.int, aten.slice.Tensor})
"""Ops sharing their input's parameters in a mode with `tables` (an NPU pads, slices and selects int8 values)."""
LAYER_OPS = WEIGHTED | ACTIVATION_OPS
"""The ops whose quantization the report measures one by one ("layers")."""


def is_annotated(node: Node) -> bool:
    annotation = node.meta.get(ANNOTATION)
    return annotation is not None and annotation._annotated


def _float_tensor(arg: Any) -> bool:
    value = arg.meta.get("val") if isinstance(arg, Node) else None
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _annotate(node: Node, inputs: dict[Node, QuantizationSpecBase], output: QuantizationSpecBase | None) -> None:
    node.meta[ANNOTATION] = QuantizationAnnotation(input_qspec_map=inputs, output_qspec=output, _annotated=True)


@dataclass(frozen=True)
class Choices:
    """What the accuracy search chose, by node name: nodes kept float, nodes given another
    scheme (an int4 linear made int8-dynamic), and the observer of a value (the node it observes)."""

    keep_float: frozenset[str] = frozenset()
    schemes: Mapping[str, str] = field(default_factory=dict)
    observers: Mapping[str, str] = field(default_factory=dict)

    def scheme_of(self, node: Node, schemes: SchemeMap) -> str:
        if node.name in self.keep_float:
            return FLOAT
        return self.schemes.get(node.name) or schemes.scheme_of(node)


class EtbuildQuantizer(Quantizer):
    """Annotates by `schemes` (per node), weights per channel or per tensor, with the search's `choices`,
    in the `mode` the recipe's backends ask for (etbuild.quantize.schemes.Mode)."""

    def __init__(self, schemes: SchemeMap, per_channel: bool, choices: Choices | None = None,
                 mode: Mode = MODES[DEFAULT_MODE]) -> None:
        super().__init__()
        self.schemes, self.per_channel, self.choices = schemes, per_channel, choices or Choices()
        self.keep_float, self.mode = self.choices.keep_float, mode

    def scheme_of(self, node: Node) -> str:
        """The scheme `node` is quantized with (`float`: none)."""
        scheme = self.choices.scheme_of(node, self.schemes)
        if scheme == DYNAMIC and node.target in CONV1D and not self._named(node):
            return FLOAT  # as ExecuTorch's dynamic config: a 1-D convolution only where the recipe names it
        return FLOAT if scheme == INT4 and node.target is aten.linear.default else scheme  # weights.py rewrites it

    def _named(self, node: Node) -> bool:
        return node.name in self.choices.schemes or self.schemes.named(node)

    def _static(self, value: Node, op: Node, s: Specs) -> QuantizationSpecBase | None:
        """The spec of static activation `value` that `op` quantizes, with its observer (None: dynamic or none)."""
        if not s.static:
            return s.inputs
        return static_activation(self.choices.observers.get(value.name) or self.schemes.observer_of(op))

    def annotate(self, model: GraphModule) -> GraphModule:
        for node in model.graph.nodes:
            if node.op != "call_function" or is_annotated(node):
                continue
            scheme = self.scheme_of(node)
            if scheme == FLOAT:
                continue
            s = specs(scheme, self.per_channel)
            if node.target in WEIGHTED:
                self._weighted(node, s)
            elif (node.target in ACTIVATION_OPS or (self.mode.tables and node.target in TABLE_OPS)) and s.static:
                self._activation_op(node, s)
            elif (node.target in SHARED or (self.mode.tables and node.target in PADS)) and s.static:
                _shared(node)
            elif node.target is aten.cat.default and s.static:
                _shared_cat(node)
        return model

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        """In a mode with `tables`, attention written out so that an NPU gets each step in int8."""
        return decompose_attention(model) if self.mode.tables else model

    def validate(self, model: GraphModule) -> None:
        """Nothing to check: every annotation is made from a supported pattern."""

    def _weighted(self, node: Node, s: Specs) -> None:
        x, weight = node.args[0], node.args[1]
        if not (_float_tensor(x) and isinstance(weight, Node) and weight.op == "get_attr"):
            return
        inputs: dict[Node, QuantizationSpecBase] = {weight: s.weight}
        spec = self._static(x, node, s) if isinstance(x, Node) else None
        if spec is not None and x.name not in self.keep_float:
            inputs[x] = spec
            bias = node.args[2] if len(node.args) > 2 else None
            if self.mode.int32_bias and s.static and isinstance(bias, Node) and bias.op == "get_attr":
                inputs[bias] = int32_bias((x, node), (weight, node))
        _annotate(node, inputs, self._output(node, s))

    def _activation_op(self, node: Node, s: Specs) -> None:
        tensors = [a for a in node.args[:2] if _float_tensor(a) and a.name not in self.keep_float]
        if tensors and s.inputs is not None:
            specs_of = {t: self._static(t, node, s) for t in tensors}
            _annotate(node, {t: spec for t, spec in specs_of.items() if spec is not None}, self._output(node, s))

    def _output(self, node: Node, s: Specs) -> QuantizationSpecBase | None:
        """The output spec of a quantized op: on the op, or on the activation fused after it."""
        users = list(node.users)
        if not s.static or all(u.name in self.keep_float for u in users):
            return None
        fused = users[0] if len(users) == 1 else None
        if fused is not None and fused.target in FUSED_ACTIVATIONS and self.scheme_of(fused) == self.scheme_of(node):
            if fused.users and all(u.name in self.keep_float for u in fused.users):
                return None  # only float ops read it
            _annotate(fused, {}, self._static(fused, node, s))
            return None
        return self._static(node, node, s)


def _shared_cat(node: Node) -> None:
    """A concatenation of quantized values: its inputs and output share one set of parameters, the
    first input producer's, and the other producers write theirs with it too, so the concatenation
    runs on int8 values with nothing requantized (Inception, SqueezeNet's fire modules, DenseNet).
    Left float when an input is not the quantized output of an op (a constant, a float value)."""
    parts = node.args[0]
    annotations = [p.meta.get(ANNOTATION) if isinstance(p, Node) else None for p in parts]
    if not parts or any(a is None or a.output_qspec is None for a in annotations):
        return
    first = parts[0]
    shared = SharedQuantizationSpec(first)
    for part, annotation in zip(parts[1:], annotations[1:]):
        if part is not first and not isinstance(annotation.output_qspec, SharedQuantizationSpec):
            annotation.output_qspec = shared
    _annotate(node, {part: shared for part in parts}, shared)


def _shared(node: Node) -> None:
    """Input and output share the parameters of the input's producer, when that is quantized."""
    source = node.args[0]
    annotation = source.meta.get(ANNOTATION) if isinstance(source, Node) else None
    if isinstance(source, Node) and annotation is not None and annotation.output_qspec is not None:
        shared = SharedQuantizationSpec(source)
        _annotate(node, {source: shared}, shared)
