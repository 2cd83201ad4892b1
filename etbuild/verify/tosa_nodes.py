"""Each TOSA graph, node by node, against the quantized torch model: every int8 value within one step.

Why node by node. The quantized torch model (the converted model verify compares programs with) computes
each layer in float: float32 products of dequantized values, then `round(x / scale)` half to even. A TOSA
graph, and the NPU, compute it in integers: exact int32 sums, then a fixed-point RESCALE rounding half up.
The two agree except where a float sum lands within its own rounding error of a half step: there they
differ by one step (cnn-ethos-u85: about 3 elements in a million, in 8 of its 65 int8 values). A deep
network carries such a step onward and magnifies it (a MobileNetV2 expand convolution's output step is
a fifth of its input's), so at the model's output the two are up to 17 steps apart although no
operation is more than one step off. The whole-program comparison therefore judges by the float64
bound; this judge checks what "within one quantization step" can mean for a deep graph: each operation.

How. The recipe's quantized methods are lowered again up to the partition step, without Vela, and every
partition of the TOSA walk (the Ethos-U backend's too) is lowered with each int8 value it computes added
as an output. Each runs in the TOSA reference model on the int8 inputs torch computes for it on verify's
samples; then each call of the partition is evaluated in torch on the graph's own int8 inputs to it, and
every int8 value must be within one step of torch's. A softmax, which the walk computes by an integer
approximation, is reported (`approximated_max_steps`) but not judged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.aot import Subgraph
from etbuild.backends.options import parse_options
from etbuild.backends.tosa.aot.lower import Lowering
from etbuild.backends.tosa.aot.quant import Q
from etbuild.backends.tosa.aot.tables import SOFTMAX_OPS
from etbuild.backends.tosa.aot.values import TORCH, in_layout
from etbuild.backends.tosa.runtime.reference import ReferenceGraph
from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.partition import aot_backend, subgraph
from etbuild.model import sample_inputs
from etbuild.recipe import Recipe
from etbuild.runtime.backend_registry import backend_options
from etbuild.stages import handoff

TOSA_BACKENDS = ("ethos-u", "tosa")
SAMPLES = 2
APPROXIMATED = SOFTMAX_OPS
"""Calls the walk lowers by an integer approximation (a softmax's exp table and reciprocal): reported, not judged."""
"""Verify's first samples the judge runs (each partition runs in the reference model once per sample)."""
BEFORE_PARTITION = "fuse-quantized-embeddings"
JUDGE = ("each int8 value a TOSA graph computes (TOSA reference model) against the quantized torch model's call "
         "fed the graph's own int8 inputs: within one step")


class _Probe(Lowering):
    """The walk, with each int8 value it computes (a quantize's result) added as an output of the graph."""

    def probe(self, sub: Subgraph) -> tuple[bytes, list[Node]]:
        self.run(sub)
        probed = []
        for node, value in self.values.items():
            if node.target is Q and value.scales is None and value.tensor not in self.inputs:
                self.b.output(in_layout(self.b, value, TORCH).tensor)
                probed.append(node)
        return self.b.serialize(), probed


@dataclass
class _Tally:
    values: int = 0
    elements: int = 0
    differing: int = 0
    max_steps: int = 0
    end_to_end: int = 0
    approximated: int = 0

    def to_json(self, index: int) -> dict[str, Any]:
        return {"partition": index, "values": self.values, "elements": self.elements, "differing": self.differing,
                "max_steps": self.max_steps, "end_to_end_max_steps": self.end_to_end,
                "approximated_max_steps": self.approximated, "passed": self.max_steps <= 1}


def _value(env: Mapping[Node, Any], constants: Mapping[Node, torch.Tensor], a: Any) -> Any:
    if isinstance(a, Node):
        return env[a] if a in env else constants[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_value(env, constants, b) for b in a)
    return a


def _call(node: Node, env: Mapping[Node, Any], constants: Mapping[Node, torch.Tensor]) -> Any:
    return node.target(*_value(env, constants, node.args),
                       **{k: _value(env, constants, v) for k, v in node.kwargs.items()})


def evaluate(method: GraphMethod, inputs: Sequence[torch.Tensor]) -> dict[Node, Any]:
    """Every node's value in torch (the quantized model as the partition step sees it)."""
    user = iter(inputs)
    env: dict[Node, Any] = {}
    for node in method.exported.graph.nodes:
        if node.op == "placeholder":
            env[node] = method.constants[node] if node in method.constants else next(user)
        elif node.op == "call_function":
            env[node] = _call(node, env, method.constants)
    return env


def judge_partition(sub: Subgraph, env: Mapping[Node, Any], tally: _Tally) -> None:
    """Run one partition's probed graph on torch's inputs to it, then each call on the graph's own values."""
    tosa, probed = _Probe(sub).probe(sub)
    outputs = ReferenceGraph(tosa).run([np.asarray(env[n]) for n in sub.inputs])
    found = {n: torch.from_numpy(o.reshape(tuple(n.meta["val"].shape)))
             for n, o in zip(probed, outputs[len(sub.outputs):])}
    local: dict[Node, Any] = {n: env[n] for n in sub.inputs}
    for node in sub.nodes:
        result = _call(node, local, sub.constants)
        if node in found:
            steps = (found[node].to(torch.int32) - result.to(torch.int32)).abs()
            end = (found[node].to(torch.int32) - env[node].to(torch.int32)).abs()
            tally.values, tally.elements = len(found), tally.elements + steps.numel()
            tally.differing += int((steps > 0).sum())
            if getattr(node.args[0], "target", None) in APPROXIMATED:
                tally.approximated = max(tally.approximated, int(steps.max()))
            else:
                tally.max_steps = max(tally.max_steps, int(steps.max()))
            tally.end_to_end = max(tally.end_to_end, int(end.max()))
            result = found[node]
        local[node] = result


class _Stop(Exception):
    """Ends the lowering once the judge has run (nothing after the partition step is needed)."""


def judge_method(recipe: Recipe, name: str, exported: torch.export.ExportedProgram) -> list[dict[str, Any]]:
    """Per partition of one method (as the recipe's TOSA-family backend partitions it), how far the TOSA
    graph's int8 values are from torch's, over verify's samples."""
    from etbuild.stages.lower import lower

    cfg = next(b for b in recipe.backends if b.name in TOSA_BACKENDS)
    options = parse_options(backend_options(cfg.name), cfg.options, cfg.name)
    samples = sample_inputs(recipe, min(SAMPLES, recipe.verify.samples), recipe.verify.seed, name)
    results: list[dict[str, Any]] = []

    def after(step: Any, form: Any) -> None:
        if step.name != BEFORE_PARTITION:
            return
        (method,) = form.methods
        groups = aot_backend(cfg.name).partition(method, options).groups
        subs = [subgraph(group, method.constants) for group in groups]
        tallies = [_Tally() for _ in subs]
        for sample in samples:
            env = evaluate(method, [t for t in sample if isinstance(t, torch.Tensor)])
            for sub, tally in zip(subs, tallies):
                judge_partition(sub, env, tally)
        results.extend(t.to_json(k) for k, t in enumerate(tallies))
        raise _Stop

    with contextlib.suppress(_Stop):
        lower({name: exported}, after, backends=[cfg])
    return results


def uses_tosa(recipe: Recipe) -> bool:
    """Whether the recipe lowers partitions to TOSA (the ethos-u or tosa backend)."""
    return any(b.name in TOSA_BACKENDS for b in recipe.backends)


def judge_recipe(recipe: Recipe, quantized: Mapping[str, Path]) -> dict[str, Any]:
    """verify.json's `tosa_nodes`: per method and partition, the judge's figures, and whether all passed; when
    the judge cannot run (a graph torch cannot evaluate call by call), why, and nothing judged."""
    try:
        with torch.no_grad():
            methods = {name: judge_method(recipe, name, handoff.read(path)) for name, path in quantized.items()}
    except Exception as exc:  # reported in verify.json, see the docstring
        return {"judge": JUDGE, "skipped": f"{type(exc).__name__}: {exc}", "passed": True}
    passed = all(p["passed"] for parts in methods.values() for p in parts)
    return {"judge": JUDGE, "methods": methods, "passed": passed}


def failures(report: Mapping[str, Any] | None) -> list[str]:
    """verify's failure lines for partitions whose TOSA graph is more than one step off somewhere."""
    return [f"{name} partition {p['partition']}: a TOSA graph value {p['max_steps']} steps from the quantized torch "
            f"model's call fed the same int8 inputs ({p['differing']} of {p['elements']:,} elements differ; one "
            "step is the most a correct lowering differs by)"
            for name, parts in (report or {}).get("methods", {}).items() for p in parts if not p["passed"]]
