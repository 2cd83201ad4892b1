"""Which calls an integer TOSA partition takes, and why each other call stays on the CPU.

A call is taken when the walk has a rule for it (lower.py), its own arguments fit that rule, a target's
check passes (the Ethos-U limits, etbuild.backends.ethos_u.aot.limits), and it sits inside the int8
domain: every float call reads dequantized int8 values (or int32 accumulators) and is read only by taken
calls, every quantize reads a taken call, every dequantize is read only by taken calls. Under an INT
profile float math is never delegated (ExecuTorch's CheckProperQuantization), so the model input's
quantize and the output's dequantize stay on the CPU: a delegate's inputs and outputs are int8.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

import torch
from torch.fx import Graph, Node

from etbuild.backends.tosa.aot.lower import RULES
from etbuild.backends.tosa.aot.quant import DQ, WEIGHT_DQ, Q, activation_params, weight_of
from etbuild.backends.tosa.aot.tables import SOFTMAX_OPS, TABLE_OPS, output_params

aten = torch.ops.aten
MAX_RANK = 6
Check = Callable[[Node], "str | None"]
ACCUMULATING = frozenset({aten.convolution.default, aten.addmm.default, aten.mm.default, aten.linear.default,
                          aten.add.Tensor, aten.mul.Tensor, aten.bmm.default, aten.native_layer_norm.default})
CARRIERS = frozenset({operator.getitem, aten.view.default, aten._unsafe_view.default, aten.reshape.default,
                      aten.unsqueeze.default, aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default})
"""Calls that may carry an int32 accumulator to its quantize (its per-channel scales stay on the last dim)."""
REQUANTIZED = TABLE_OPS | SOFTMAX_OPS
"""Calls whose int8 result takes the parameters of the one quantize that reads them."""
CLAMPS = frozenset({aten.relu.default, aten.hardtanh.default, aten.clamp.default})
WORK = ACCUMULATING | REQUANTIZED | {aten.max_pool2d_with_indices.default, aten.max_pool2d.default,
                                     aten.avg_pool2d.default, aten.mean.dim, aten.cat.default}
LAST_DIM_ONLY = "a layer norm over other than the last dim, or with a weight or bias that is not a constant"
"""Calls worth a delegate: a partition of views and requantizes alone is left on the CPU."""


def op_name(node: Node) -> str:
    return getattr(node.target, "__name__", str(node.target))


def reasons(graph: Graph, constants: Mapping[Node, torch.Tensor], check: Check | None = None
            ) -> dict[Node, str | None]:
    """Each call's reason to stay out (None: taken)."""
    why = {n: _own_reason(n, constants, check) for n in graph.nodes if n.op == "call_function" and n not in constants}
    changed = True
    while changed:
        changed = False
        for node, reason in why.items():
            if reason is None:
                found = _context_reason(node, why, constants)
                if found is not None:
                    why[node], changed = found, True
    return why


def _own_reason(node: Node, constants: Mapping[Node, torch.Tensor], check: Check | None) -> str | None:
    if node.target not in RULES:
        found = check(node) if check is not None else None
        return found or f"etbuild's TOSA lowering has no rule for {op_name(node)}"
    for value in (node.meta.get("val"), *(a.meta.get("val") for a in node.all_input_nodes)):
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(t, torch.Tensor) and (t.dim() > MAX_RANK or not all(isinstance(s, int) for s in t.shape)):
                return f"a tensor of {t.dim()} dims or with symbolic sizes (TOSA here takes static, at most 6)"
    found = _argument_reason(node, constants)
    if found is None and check is not None:
        found = check(node)
    return found


def _argument_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    """Why the rule for the call cannot take these arguments, or None."""
    if node.target in (Q, DQ) and node.args[0] not in constants:
        return None if activation_params(node) is not None else "not an int8 per-tensor (de)quantize in [-128, 127]"
    check = ARGUMENT_CHECKS.get(node.target)
    return None if check is None else check(node, constants)


def _weight_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    found = weight_of(node, constants, True) or weight_of(node, constants)
    if found or (activation_params(node) is not None and constants[node.args[0]].dtype is torch.int8):
        return None  # a weight, or an int8 constant quantized as an activation (a position table)
    return "not an int8 constant weight"


def _linear_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    addmm = node.target is aten.addmm.default
    x, w = (node.args[1], node.args[2]) if addmm else (node.args[0], node.args[1])
    if x.meta["val"].dim() != 2:
        return "a linear layer on a value of other than 2 dims"
    if weight_of(w, constants, transposed=node.target is not aten.linear.default) is None:
        return "its weight is not an int8 constant with one scale per output channel"
    return None


def _max_pool_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    args = node.args
    if len(args) > 4 and any(d != 1 for d in args[4]):
        return "max pooling with dilation"
    return None


def _avg_pool_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    args = node.args
    if (len(args) > 3 and any(args[3])) or (len(args) > 4 and args[4]) or (len(args) > 6 and args[6] is not None):
        return "average pooling with padding, ceil_mode or a divisor"
    return None


def _mean_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    if node.args[0].meta["val"].dtype is not torch.float32 or len(node.args) < 2 or not node.args[1]:
        return "a mean over every dim or of a non-float value"
    return None


def _layer_norm_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    shape = node.args[0].meta["val"].shape
    if list(node.args[1]) != [shape[-1]] or any(a is not None and a not in constants for a in node.args[2:4]):
        return LAST_DIM_ONLY
    return None


def _bmm_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    if any(a in constants for a in node.args[:2]):
        return "a batched matmul with a constant operand"
    return None


def _slice_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    step = node.args[4] if len(node.args) > 4 else 1
    return None if step == 1 else f"a slice with step {step}"


def _add_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    if len(node.args) > 2 or node.kwargs.get("alpha", 1) != 1 or not isinstance(node.args[1], Node):
        return "an add with alpha or a scalar"
    shapes = [tuple(a.meta["val"].shape) for a in node.args[:2]]
    if shapes[0] != shapes[1] and tuple(node.meta["val"].shape) not in shapes:
        return "an add that broadcasts both of its values"
    return None


def _mul_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    if not isinstance(node.args[0], Node):
        return "a multiply of a scalar by a value"
    if not isinstance(node.args[1], Node):
        return None if float(node.args[1]) > 0 else "a multiply by a scalar that is not positive"
    return None


def _cat_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    if any(not isinstance(p, Node) for p in node.args[0]) or all(p in constants for p in node.args[0]):
        return "a concatenation of constants alone"
    if any(p in constants for p in node.args[0]) and output_params(node) is None:
        return "a concatenation with a constant part whose result is not read by one int8 quantize"
    return None


def _pad_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    return "a pad that crops (negative widths)" if any(w < 0 for w in node.args[1]) else None


def _softmax_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    if node.args[0].meta["val"].shape[node.args[1]] > 256:
        return "a softmax over more than 256 values (its sum's table covers at most 256)"
    return None


def _getitem_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    return "reads a pool's indices" if node.args[1] != 0 else None


def _convolution_reason(node: Node, constants: Mapping[Node, torch.Tensor]) -> str | None:
    x, w = node.args[0], node.args[1]
    transposed, groups = node.args[6], node.args[8]
    rank = x.meta["val"].dim()
    if transposed or rank not in (3, 4):
        return "a transposed or 3-D convolution"
    if weight_of(w, constants) is None:
        return "its weight is not an int8 constant with one scale per output channel"
    channels, out = x.meta["val"].shape[1], w.meta["val"].shape[0]
    if groups != 1 and not (groups == channels and out % channels == 0):
        return f"a grouped convolution ({groups} groups, neither 1 nor depthwise)"
    return None


ARGUMENT_CHECKS: dict[object, Callable[[Node, Mapping[Node, torch.Tensor]], str | None]] = {
    **dict.fromkeys(WEIGHT_DQ, _weight_reason), aten.convolution.default: _convolution_reason,
    **dict.fromkeys((aten.addmm.default, aten.mm.default, aten.linear.default), _linear_reason),
    aten.max_pool2d_with_indices.default: _max_pool_reason, aten.max_pool2d.default: _max_pool_reason,
    aten.avg_pool2d.default: _avg_pool_reason, aten.mean.dim: _mean_reason, aten.add.Tensor: _add_reason,
    aten.mul.Tensor: _mul_reason, aten.cat.default: _cat_reason, aten.constant_pad_nd.default: _pad_reason,
    **dict.fromkeys(SOFTMAX_OPS, _softmax_reason),
    operator.getitem: _getitem_reason, aten.native_layer_norm.default: _layer_norm_reason,
    aten.bmm.default: _bmm_reason, aten.slice.Tensor: _slice_reason,
}
"""Per target: why the walk's rule cannot take a call's arguments (None: it can)."""


def _context_reason(node: Node, why: Mapping[Node, str | None], constants: Mapping[Node, torch.Tensor]) -> str | None:
    """Why a call that fits on its own cannot be inside the int8 domain here, or None."""
    taken = lambda n: n in why and why[n] is None  # noqa: E731
    if node.target is Q:
        source = node.args[0]
        if not taken(source) or source.target is DQ:
            return "quantizes a value computed on the CPU: a delegate's inputs are int8, quantized before it"
        return None
    late = [u for u in node.users if not taken(u)]
    if late:
        return f"its result is read by {late[0].name}, which stays on the CPU (a delegate's outputs are int8)"
    if node.target is DQ or node.target in WEIGHT_DQ:
        return None
    for arg in node.all_input_nodes:
        if arg not in constants and not taken(arg):
            return f"reads {arg.name}, which stays on the CPU"
    if node.target not in CLAMPS and any(_kind(a) != "int8" for a in _data_args(node) if a not in constants) \
            and not _carries(node):
        return "reads an int32 accumulator that is not quantized first"
    if node.target in REQUANTIZED and output_params(node) is None:
        return "its result is not read by exactly one int8 quantize (a table's or softmax's output parameters)"
    return None


def _data_args(node: Node) -> list[Node]:
    """The activations a call reads (weights and biases aside)."""
    if node.target is aten.cat.default:
        return list(node.args[0])
    if node.target is aten.addmm.default:
        return [node.args[1]]
    if node.target in (aten.add.Tensor, aten.mul.Tensor, aten.bmm.default):
        return [a for a in node.args[:2] if isinstance(a, Node)]
    return [node.args[0]]


def _carries(node: Node) -> bool:
    """Whether a reshape or getitem passes an accumulator on with its last dim (and its scales) unchanged."""
    if node.target not in CARRIERS:
        return False
    source, result = node.args[0].meta["val"], node.meta["val"]
    source = source[0] if isinstance(source, (tuple, list)) else source
    result = result[0] if isinstance(result, (tuple, list)) else result
    return source.dim() > 0 and result.dim() > 0 and source.shape[-1] == result.shape[-1]


def _kind(node: object) -> str | None:
    """`int8` or `acc` (an int32 accumulator) for a value in the int8 domain."""
    if not isinstance(node, Node):
        return None
    if node.target is DQ or node.target is aten.cat.default or node.target in REQUANTIZED:
        return "int8"
    if node.target in ACCUMULATING:
        return "acc"
    if node.target in WEIGHT_DQ or not node.args:
        return None
    return _kind(node.args[1] if node.target is aten.addmm.default else node.args[0])
