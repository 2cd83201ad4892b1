"""Find the first value where a program departs from its torch graph (verify's failure report).

The program runs in our runtime with every value an instruction writes copied as soon as it is
written (etbuild.devtools.instrument wraps the steps; planned memory is reused, so later instructions
would overwrite it). The reference is the core-ATen graph that the lower stage's to-program
step converted, evaluated with torch node by node on the same inputs; the debug map
(etbuild.lowering.debug_map) says which node each value holds. Values are compared in the
order the program first writes them, and the first one off by more than
`atol + rtol * max|expected|` (a tolerance relative to the tensor's magnitude, so values
that cancel to near zero do not count as errors), or of another shape, is reported with its
operator, module path and the shapes of the node's inputs. Samples run in order on one loaded
method and the reference carries mutated buffers across them, as verify does.

A program that matches its lowered graph everywhere but still fails verify differs through
lowering (a decomposition or fold) or through its trimmed runtime: the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import Node
from torch.utils._pytree import tree_flatten

from etbuild.devtools import instrument
from etbuild.lowering.debug_map import ValueSource, read_debug_map
from etbuild.lowering.forms import GraphMethod, GraphProgram
from etbuild.lowering.steps import Step
from etbuild.model import sample_inputs
from etbuild.recipe import Recipe
from etbuild.runtime.kernel_registry import KernelInfo
from etbuild.runtime.program import Method, Program
from etbuild.stages import handoff
from etbuild.stages.lower import LOWERING, lower


@dataclass(frozen=True)
class Divergence:
    """The first value of a method that departs from the torch graph."""

    method: str
    sample: int
    instruction: int
    value: int
    node: str
    operator: str
    module: str
    module_type: str
    max_abs_error: float
    tolerance: float
    shape: list[int]
    expected_shape: list[int]
    input_shapes: list[list[int]]

    def describe(self) -> str:
        """`first divergence: method 'forward' sample 0, instruction 7 …` in one line."""
        where = f" in {self.module} ({self.module_type})" if self.module else ""
        shapes = ", ".join(str(s) for s in self.input_shapes) or "none"
        off = (f"max abs error {self.max_abs_error:.3g} (tolerance {self.tolerance:.3g})"
               if self.shape == self.expected_shape else f"shape {self.shape}, expected {self.expected_shape}")
        return (f"first divergence: method {self.method!r} sample {self.sample}, instruction {self.instruction} "
                f"(value {self.value}), node {self.node} ({self.operator}){where}: {off}; input shapes {shapes}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(method: GraphMethod, inputs: Sequence[Any], state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Every node's value (by name) of the method's graph on flat user inputs; `state` holds the
    mutable buffers by name and gets their new values."""
    ep, consts = method.exported, method.constants
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    user = iter(inputs)
    values: dict[str, Any] = {}

    def arg(a: Any) -> Any:
        return values[a.name] if isinstance(a, Node) else a

    with torch.no_grad():
        for node in ep.graph.nodes:
            if node in consts:
                values[node.name] = consts[node]
            elif node.op == "placeholder":
                spec = specs[node.name]
                values[node.name] = next(user) if spec.kind == InputKind.USER_INPUT else state[spec.target]
            elif node.op == "get_attr":
                values[node.name] = getattr(ep.graph_module, str(node.target))
            elif node.op == "call_function":
                args = torch.fx.node.map_aggregate(node.args, arg)
                values[node.name] = node.target(*args, **torch.fx.node.map_aggregate(node.kwargs, arg))
            elif node.op == "output":
                _write_back(ep, [arg(a) for a in tree_flatten(node.args[0])[0]], state)
    return values


def _write_back(ep: Any, results: list[Any], state: dict[str, torch.Tensor]) -> None:
    for spec, value in zip(ep.graph_signature.output_specs, results):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            state[spec.target] = value


def initial_state(method: GraphMethod) -> dict[str, torch.Tensor]:
    """The mutable buffers' initial values, by name."""
    ep = method.exported
    mutated = set(ep.graph_signature.buffers_to_mutate.values())
    return {t: (ep.state_dict[t] if t in ep.state_dict else ep.constants[t]).clone() for t in mutated}


class Capture:
    """Copies of what each instruction writes: value -> (first instruction writing it, last copy)."""

    def __init__(self, method: Method, wanted: Mapping[int, ValueSource]) -> None:
        self.values: dict[int, tuple[int, Any]] = {}
        objects = method.values.objects
        for_step = [[v for v in instrument.written(method, ins) if v in wanted]
                    for ins in instrument.instructions(method)]

        def wrap(k: int, step: instrument.Step) -> instrument.Step:
            if not for_step[k]:
                return step

            def copy_after() -> Any:
                result = step()
                for v in for_step[k]:
                    first = self.values.get(v, (k, None))[0]
                    self.values[v] = (first, np.array(objects[v], copy=True))
                return result

            return copy_after

        instrument.wrap_steps(method, wrap)


def first_divergence(
    method: Method, sample: int, captured: Capture, reference: dict[str, Any], graph: GraphMethod,
    debug: Mapping[int, ValueSource], rtol: float, atol: float,
) -> Divergence | None:
    """The first captured value (in program order) off its reference, or None."""
    nodes = {n.name: n for n in graph.exported.graph.nodes}
    for value, (pc, got) in sorted(captured.values.items(), key=lambda kv: (kv[1][0], kv[0])):
        src = debug[value]
        expected = reference.get(src.node)
        if src.item is not None and isinstance(expected, (list, tuple)):
            expected = expected[src.item]
        if not isinstance(expected, torch.Tensor):
            continue
        want = expected.detach().numpy()
        err, tol = _error(got, want, rtol, atol)
        if err > tol:
            ins = [list(reference[n.name].shape) for n in nodes[src.node].all_input_nodes
                   if isinstance(reference.get(n.name), torch.Tensor)]
            return Divergence(method.name, sample, pc, value, src.node, src.op, src.module, src.module_type,
                              err, tol, list(np.shape(got)), list(want.shape), ins)
    return None


def _error(got: Any, want: np.ndarray, rtol: float, atol: float) -> tuple[float, float]:
    """(max abs error, tolerance); an infinite error when shapes or NaN positions differ."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return float("inf"), 0.0
    a, e = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return float("inf"), 0.0
    finite = ~np.isnan(e)
    if not finite.any():
        return 0.0, atol
    diff = np.abs(a[finite] - e[finite])
    diff[np.isinf(a[finite]) & (a[finite] == e[finite])] = 0.0
    return float(diff.max()), atol + rtol * float(np.abs(e[finite]).max())


def localise(
    program: Program, graph: GraphMethod, debug: Mapping[int, ValueSource], samples: Sequence[Sequence[Any]],
    rtol: float, atol: float, kernels: Mapping[str, KernelInfo] | None = None,
) -> Divergence | None:
    """The first divergence of method `graph.name` over the samples (in order), or None."""
    method = program.load_method(graph.name, kernels=kernels)
    captured = Capture(method, debug)
    state = initial_state(graph)
    for j, sample in enumerate(samples):
        flat = tree_flatten(list(sample))[0]
        captured.values.clear()
        method(*[x.detach().numpy() if isinstance(x, torch.Tensor) else x for x in flat])
        reference = evaluate(graph, flat, state)
        found = first_divergence(method, j, captured, reference, graph, debug, rtol, atol)
        if found is not None:
            return found
    return None


def reference_graphs(methods: Mapping[str, ExportedProgram]) -> GraphProgram:
    """The graphs that the lower stage's to-program step converts, for these exported methods
    (lowering is deterministic, so their node names are those of the build's debug map)."""
    seen: list[GraphProgram] = []
    before_conversion = LOWERING.steps[-2].name

    def keep(step: Step, form: Any) -> None:
        if step.name == before_conversion:
            seen.append(form)

    lower(methods, keep)
    return seen[0]


def localise_recipe(
    recipe: Recipe, pte: Path, exports: Mapping[str, Path], debug_map: Path, methods: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """For each named method of a recipe's build: its first divergence on verify's samples (as
    JSON), or a note saying why there is none.

    Localisation explains a failure verify has already found, so its own failure (a graph the
    reference cannot evaluate, a program our full runtime refuses) becomes that note, with the
    exception's type and message, instead of hiding verify's result.
    """
    try:
        return _localise_methods(recipe, pte, exports, debug_map, methods)
    except Exception as exc:  # reported in the note, see the docstring
        return {name: {"note": f"localisation failed: {type(exc).__name__}: {exc}"} for name in methods}


def _localise_methods(
    recipe: Recipe, pte: Path, exports: Mapping[str, Path], debug_map: Path, methods: Sequence[str]
) -> dict[str, dict[str, Any]]:
    debug = read_debug_map(debug_map)
    exported = {name: handoff.read(path) for name, path in exports.items()}
    graphs = {g.name: g for g in reference_graphs(exported).methods}
    program = Program.load(pte)
    cfg = recipe.verify
    out: dict[str, dict[str, Any]] = {}
    for name in methods:
        samples = sample_inputs(recipe, cfg.samples, cfg.seed, name)
        found = localise(program, graphs[name], debug.get(name, {}), samples, cfg.rtol, cfg.atol)
        out[name] = found.to_json() if found else {"note": NO_DIVERGENCE}
    return out


NO_DIVERGENCE = ("every value matches the lowered torch graph in etbuild's full runtime: the difference comes "
                 "from lowering (a decomposition or fold) or from the trimmed runtime")


def describe_divergence(method: str, found: Mapping[str, Any]) -> str:
    """The line for one method's entry of `localise_recipe`'s result."""
    return f"method {method!r}: {found['note']}" if "note" in found else Divergence(**found).describe()
