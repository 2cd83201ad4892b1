"""An observed graph run with a chosen subset of its quantization applied (fake-quantized).

A layer (a quantized op of `LAYER_OPS`, with its fused activation) owns the observers on its
inputs, its weight and its output in the calibrated, observed graph. Running that graph with
only some observers applied as quantize → dequantize (the same ops, with the same parameters,
that convert would insert) measures a choice without preparing again. A `State` says what to
apply: which observers, which of them to take from another calibration of the same graph
(another observer's parameters for the same value), and which linears to run with int8
per-token inputs and int4 weights in groups or int8 weights per channel, as
`weights.int4_linears` and `weights.per_token_inputs` rewrite them after convert.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import GraphModule, Interpreter, Node
from torch.utils._pytree import tree_flatten

from etbuild.quantize.ao import ANNOTATION
from etbuild.quantize.metrics import Outputs, snr_db
from etbuild.quantize.quantizer import ACTIVATION_OPS, FUSED_ACTIVATIONS, LAYER_OPS
from etbuild.quantize.weights import INT4_RANGE, INT8_RANGE, group_quantize

qd = torch.ops.quantized_decomposed
_PER_CHANNEL = (torch.per_channel_symmetric, torch.per_channel_affine)
_OBSERVER_PREFIX = "activation_post_process"


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


def int4_weight(weight: torch.Tensor, group_size: int) -> torch.Tensor:
    """A linear weight through the int4 group quantization `weights.int4_linears` stores."""
    q, scales = group_quantize(weight, group_size, INT4_RANGE, bf16_scales=True, fit=True)
    return qd.dequantize_per_channel_group(q, scales, None, *INT4_RANGE, torch.int8, group_size, torch.float32)


def per_token(x: torch.Tensor) -> torch.Tensor:
    """An activation through int8 per-token quantize → dequantize, as int4 linears take their input."""
    scale, zero = qd.choose_qparams_per_token_asymmetric(x, torch.int8)
    q = qd.quantize_per_token(x, scale, zero, *INT8_RANGE, torch.int8)
    return qd.dequantize_per_token(q, scale, zero, *INT8_RANGE, torch.int8, torch.float32)


@dataclass(frozen=True)
class State:
    """What a run applies: the `active` observers (module names), observers taken from another
    calibration (`swapped`: module name → observer), and the linears run with int8 per-token
    inputs (`per_token`: node name → weight bits, 4 in groups or 8 per channel)."""

    active: frozenset[str]
    swapped: Mapping[str, torch.nn.Module] = field(default_factory=dict)
    per_token: Mapping[str, int] = field(default_factory=dict)


def is_observer(node: Node) -> bool:
    return node.op == "call_module" and str(node.target).startswith(_OBSERVER_PREFIX)


def unobserved(node: Node) -> Node:
    """The value an observer node (or a chain of them) observes; `node` itself if it is none."""
    while is_observer(node):
        node = node.args[0]
    return node


class Observed(Interpreter):
    """Runs an observed graph applying what `state` says (other observers pass values through)."""

    def __init__(self, gm: GraphModule, state: State, group_size: int, cache: dict[str, torch.Tensor]) -> None:
        super().__init__(gm, garbage_collect_values=not state.per_token)
        self.state, self.group_size, self.cache = state, group_size, cache

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        if str(target).startswith(_OBSERVER_PREFIX):
            if target not in self.state.active:
                return args[0]
            return fake_quantize(self.state.swapped.get(target) or self.fetch_attr(target), args[0])
        return super().call_module(target, args, kwargs)

    def run_node(self, n: Node) -> Any:
        bits = self.state.per_token.get(n.name)
        if bits is None:
            return super().run_node(n)
        x, weight = (self.env[unobserved(a)] for a in n.args[:2])
        key = f"{n.name}:{bits}"
        if key not in self.cache:
            observer = self.fetch_attr(str(n.args[1].target)) if is_observer(n.args[1]) else None
            self.cache[key] = int4_weight(weight, self.group_size) if bits == 4 else fake_quantize(observer, weight)
        bias = self.env[n.args[2]] if len(n.args) > 2 and isinstance(n.args[2], Node) else None
        return torch.nn.functional.linear(per_token(x), self.cache[key], bias)


@dataclass(frozen=True)
class ObservedLayer:
    """A layer of an observed graph: its node, fused activation (if any), observers, and its
    static activation observers (`activations`: observed value name → observer module name)."""

    node: str
    fused: str | None
    observers: frozenset[str]
    activations: Mapping[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.node, self.fused) if self.fused else (self.node,)


def observed_layers(gm: GraphModule) -> list[ObservedLayer]:
    """The annotated layers of an observed graph with the observers they own."""
    modules = dict(gm.named_modules())
    layers = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in LAYER_OPS or ANNOTATION not in node.meta:
            continue
        users = list(node.users)
        fused = users[0] if len(users) == 1 and users[0].target in FUSED_ACTIVATIONS else None
        around = [a for a in node.args if isinstance(a, Node)] + list((fused or node).users)
        owned = [n for n in around if is_observer(n)]
        if owned:
            static = {unobserved(n).name: str(n.target) for n in owned if _static_activation(n, modules)}
            layers.append(ObservedLayer(node.name, fused.name if fused else None,
                                        frozenset(str(n.target) for n in owned), static))
    return layers


def _static_activation(node: Node, modules: Mapping[str, torch.nn.Module]) -> bool:
    """Whether observer `node` calibrates a static activation range (not a weight's, not dynamic)."""
    observer = modules[str(node.target)]
    return (unobserved(node).op != "get_attr" and not getattr(observer, "is_dynamic", False)
            and getattr(observer, "qscheme", None) == torch.per_tensor_affine)


def activation_observers(gm: GraphModule) -> dict[str, torch.nn.Module]:
    """Observed value name → the observer module of each static activation of an observed graph."""
    modules = dict(gm.named_modules())
    return {unobserved(n).name: modules[str(n.target)] for n in gm.graph.nodes
            if is_observer(n) and _static_activation(n, modules)}


@dataclass(frozen=True)
class Watch:
    """One observer of an observed graph: the value it observes, whether that is a weight, the
    nodes that read the observed value (through chains of observers), and, when an activation
    op (add, mul, matmul, bmm) or its fused activation makes the value, that op's inputs."""

    module: str
    value: str
    weight: bool
    consumers: tuple[str, ...]
    op_inputs: tuple[str, ...] = ()


def watches(gm: GraphModule) -> list[Watch]:
    """Every observer of an observed graph as a `Watch`."""
    found = []
    for node in gm.graph.nodes:
        if is_observer(node) and not is_observer(node.args[0]):
            value = unobserved(node)
            found.append(Watch(str(node.target), value.name, value.op == "get_attr", _consumers(node),
                               _op_inputs(value)))
    return found


def _op_inputs(value: Node) -> tuple[str, ...]:
    """The inputs of the activation op that makes `value` (directly or through its fused activation)."""
    op = value.args[0] if value.target in FUSED_ACTIVATIONS and isinstance(value.args[0], Node) else value
    if op.target not in ACTIVATION_OPS:
        return ()
    return tuple(unobserved(a).name for a in op.args[:2] if isinstance(a, Node))


def _consumers(node: Node) -> tuple[str, ...]:
    names = []
    for user in node.users:
        names.extend(_consumers(user) if is_observer(user) else [user.name])
    return tuple(names)


def active_observers(watched: Sequence[Watch], layers: frozenset[str], floats: frozenset[str]) -> frozenset[str]:
    """The observers that stay when the nodes `floats` are kept float, as the quantizer decides:
    a weight's while its layer is quantized; an activation's while a quantized layer (a node of
    `layers`) reads it and it is not itself a float node's output, or while it is a quantized
    layer's output that something not float reads (an activation op's, while one of its inputs
    is not a float node's output)."""
    active = set()
    for w in watched:
        if w.weight:
            keep = any(c in layers and c not in floats for c in w.consumers)
        else:
            read = w.value not in floats and any(c in layers and c not in floats for c in w.consumers)
            made = (w.value in layers and w.value not in floats and any(c not in floats for c in w.consumers)
                    and (not w.op_inputs or any(i not in floats for i in w.op_inputs)))
            keep = read or made
        if keep:
            active.add(w.module)
    return frozenset(active)


def outputs(run: Callable[..., Any], samples: Sequence[tuple[Any, ...]]) -> Outputs:
    with torch.no_grad():
        return [tree_flatten(run(*s))[0] for s in samples]


def snr_db_of(reference: Outputs, quantized: Outputs) -> float:
    """The SNR over every float output of every sample."""
    pairs = [(r, q) for rs, qs in zip(reference, quantized) for r, q in zip(rs, qs) if r.is_floating_point()]
    return snr_db([r for r, _ in pairs], [q for _, q in pairs])
