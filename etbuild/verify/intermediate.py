"""When a method's outputs do not vary across samples, compare the last intermediate value that does.

An output that is the same for every input (a zero-initialised classifier, a constant head)
passes verify whatever the program computes before it. So verify finds, in the method's
exported graph run eagerly on each sample, the last floating-point value that differs
between samples, compiles the graph cut at that value into a program of its own (our
lowering with the recipe's backends, so the prefix is delegated as the program's is; our runtime)
and compares it with the eager values under the same bound as the outputs. The report names the
value, the module that computes it, the backends and the error found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.fx import Graph, GraphModule, Interpreter, Node

from etbuild.kernels import native
from etbuild.lowering.sources import module_path
from etbuild.recipe import BackendConfig
from etbuild.verify.compare import compare_output


class _Recorder(Interpreter):
    """Runs a graph and keeps every floating-point tensor it computes, by node."""

    def __init__(self, gm: GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[Node, np.ndarray] = {}

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        if n.op == "call_function" and isinstance(result, torch.Tensor) and result.is_floating_point():
            self.values[n] = result.detach().numpy().copy()
        return result


def last_varying(gm: GraphModule, samples: list[tuple[Any, ...]]) -> tuple[Node, list[np.ndarray]] | None:
    """The last computed float value (graph order) that differs between samples, with its value per sample."""
    runs = []
    for sample in samples:
        recorder = _Recorder(gm)
        with torch.no_grad():
            recorder.run(*sample)
        runs.append(recorder.values)
    for node in reversed(list(gm.graph.nodes)):
        values = [run.get(node) for run in runs]
        if all(v is not None for v in values) and any(not np.array_equal(values[0], v) for v in values[1:]):
            return node, values
    return None


def cut_at(gm: GraphModule, node: Node) -> GraphModule:
    """A module computing only `node`'s value from the same inputs (every input kept, in order)."""
    needed, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(n.all_input_nodes)
    graph = Graph()
    env: dict[Node, Node] = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder" or n in needed:
            env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(env[node])
    return GraphModule(gm, graph)


def compare_intermediate(
    exported: ExportedProgram, samples: list[tuple[Any, ...]], rtol: float, atol: float,
    backends: Sequence[BackendConfig] = (),
) -> dict[str, Any]:
    """The report of the last varying intermediate value: which value, where, error and bound (or why none),
    the cut program lowered with `backends` (the recipe's)."""
    from etbuild.pipeline import compile_module
    from etbuild.runtime import Program

    gm = exported.module()
    found = last_varying(gm, samples)
    if found is None:
        return {"node": None, "passed": True, "note": "no intermediate value varies across the samples"}
    node, expected = found
    cut = cut_at(gm, node)
    with native.numpy_paths():  # a few calls: numba's start in this process would cost more than its loops save
        method = Program.from_bytes(compile_module(cut, samples[0], backends=backends).pte).load_method("forward")
        actual = [np.asarray(method(*[t.numpy() for t in sample])[0]) for sample in samples]
    return {"node": node.name, "module": module_path(node), "backends": [b.name for b in backends],
            **compare_output(expected, actual, rtol, atol)}
