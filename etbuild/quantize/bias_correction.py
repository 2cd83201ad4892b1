"""Empirical bias correction: each int8-static layer's mean output per channel made the float graph's.

Rounding a layer's weights and its input activations shifts the mean of its output per channel, by
an amount that depends on the rounding and not on the input: a systematic error that every later
layer carries, largest where a channel sums few products (depthwise and grouped convolutions). On
the calibration samples, each convolution or linear layer whose input is a statically quantized
activation and whose bias is a constant gets `float mean − quantized mean` added to its bias, one
layer after the other in graph order, so that a layer is corrected for the inputs the already
corrected layers before it give (Nagel et al., "Data-Free Quantization Through Weight Equalization
and Bias Correction", 2019, §4.2, its empirical form).

A channel whose mean rests on fewer than `MIN_VALUES` values (a classifier's outputs over fewer
samples) is not corrected: its estimate would be mostly the samples' noise. The float means are
recorded while calibrating (the observed graph computes in float); the quantized ones by running
the converted graph on every sample in lockstep, node by node, so that one pass corrects every layer
(a value of constants only, such as a weight's dequantize, computed once for all samples).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import GraphModule, Interpreter, Node

from etbuild.quantize.modules import module_path

aten = torch.ops.aten
CORRECTED_OPS = {aten.conv1d.default: 1, aten.conv2d.default: 1, aten.linear.default: -1}
"""The layers corrected, and the axis of their output channels."""

STATIC_DEQUANTIZE = torch.ops.quantized_decomposed.dequantize_per_tensor.default
"""A calibrated activation's dequantize (a dynamic one takes its scale as a tensor, `.tensor`)."""

MIN_VALUES = 16
"""The fewest values per channel (samples × positions) a correction is estimated from."""


@dataclass
class ChannelMeans:
    """Running sums per channel of the named layers' outputs, for their means."""

    sums: dict[str, torch.Tensor]
    counts: dict[str, int]

    @classmethod
    def empty(cls) -> ChannelMeans:
        return cls({}, {})

    def add(self, name: str, value: torch.Tensor, axis: int) -> None:
        axis %= value.dim()
        others = [d for d in range(value.dim()) if d != axis]
        total = value.sum(dim=others, dtype=torch.float64) if others else value.to(torch.float64)
        self.sums[name] = self.sums.get(name, 0) + total
        self.counts[name] = self.counts.get(name, 0) + value.numel() // max(value.shape[axis], 1)

    def mean(self, name: str) -> torch.Tensor:
        return self.sums[name] / self.counts[name]


class MeanRecorder(Interpreter):
    """Runs the observed (float) graph, adding each corrected op's output to `means`."""

    def __init__(self, gm: GraphModule, means: ChannelMeans) -> None:
        super().__init__(gm)
        self.means = means

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        axis = CORRECTED_OPS.get(n.target) if n.op == "call_function" else None
        if axis is not None and isinstance(result, torch.Tensor) and result.dim() >= 1:
            self.means.add(n.name, result.detach(), axis)
        return result


def correctable(node: Node) -> bool:
    """A corrected op reading a statically quantized activation, with a constant bias."""
    if node.op != "call_function" or node.target not in CORRECTED_OPS or len(node.args) < 3:
        return False
    source, bias = node.args[0], node.args[2]
    return (isinstance(source, Node) and source.target == STATIC_DEQUANTIZE
            and isinstance(bias, Node) and bias.op == "get_attr")


@dataclass
class Corrections:
    """What `correct` changed: one record per corrected layer, and each bias before and after, so
    that a judge can measure the model both ways (`use`)."""

    records: list[dict[str, Any]]
    before: dict[str, torch.Tensor]
    after: dict[str, torch.Tensor]
    applied: bool = True

    def use(self, model: GraphModule, applied: bool) -> None:
        """Put the corrected (or the original) biases into `model`."""
        with torch.no_grad():
            for target, value in (self.after if applied else self.before).items():
                functools.reduce(getattr, target.split("."), model).copy_(value)
        self.applied = applied


def correct(model: GraphModule, float_means: ChannelMeans, samples: Sequence[tuple[Any, ...]]) -> Corrections:
    """Correct the biases of `model` (converted, in place) on `samples`."""
    corrections = Corrections([], {}, {})
    if not samples:
        return corrections
    shared = _shared_biases(model)
    runs = [Interpreter(model) for _ in samples]
    for run, sample in zip(runs, samples):
        run.env = {}
        run.args_iter = iter(model.graph.process_inputs(*sample))
    constant: set[Node] = set()
    with torch.no_grad():
        for node in model.graph.nodes:
            if node.op == "get_attr" or (node.op == "call_function" and node.all_input_nodes
                                         and all(n in constant for n in node.all_input_nodes)):
                constant.add(node)  # the same for every sample (a weight's dequantize): computed once
                values = [runs[0].run_node(node)] * len(runs)
            else:
                values = [run.run_node(node) for run in runs]
            if correctable(node) and node.name in float_means.sums and node.args[2].target not in shared:
                _correct_layer(model, node, values, float_means, corrections)
            for run, value in zip(runs, values):
                run.env[node] = value
                for done in run.user_to_last_uses.get(node, ()):
                    del run.env[done]
    return corrections


def _shared_biases(model: GraphModule) -> set[str]:
    """The bias constants more than one corrected op reads (a module called twice): one shift
    cannot make both calls' means right, so neither is corrected."""
    seen: dict[str, int] = {}
    for node in model.graph.nodes:
        if correctable(node):
            seen[node.args[2].target] = seen.get(node.args[2].target, 0) + 1
    return {target for target, count in seen.items() if count > 1}


def _correct_layer(model: GraphModule, node: Node, values: list[torch.Tensor], float_means: ChannelMeans,
                   corrections: Corrections) -> None:
    """Shift the bias of `node` (and its outputs in `values`) by the float mean minus theirs."""
    axis = CORRECTED_OPS[node.target]
    ours = ChannelMeans.empty()
    for value in values:
        ours.add(node.name, value, axis)
    if ours.counts[node.name] < MIN_VALUES or float_means.counts[node.name] < MIN_VALUES:
        return
    target = node.args[2].target
    bias = functools.reduce(getattr, target.split("."), model)
    shift = (float_means.mean(node.name) - ours.mean(node.name)).to(bias.dtype)
    if shift.shape != bias.shape:
        return
    corrections.before[target] = bias.detach().clone()
    bias.data += shift
    corrections.after[target] = bias.detach().clone()
    shape = [1] * values[0].dim()
    shape[axis] = -1
    for value in values:
        value += shift.reshape(shape)
    corrections.records.append({"node": node.name, "module": module_path(node), "channels": int(shift.numel()),
                                "mean_abs_shift": float(shift.abs().mean()), "max_abs_shift": float(shift.abs().max())})
