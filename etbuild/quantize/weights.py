"""Weight quantization outside pt2e: int4 linear weights and int8/int4 embedding tables.

pt2e's specs cannot say "int4 in groups along the input dimension", and embedding tables need
no calibration, so these two rewrite the converted graph directly, in the same standard form:
a constant int8 tensor and its scales feed a `quantized_decomposed` dequantize node, which
feeds the float op. Weights are symmetric (zero point 0): each group's scale is the smallest
that keeps its values within [qmin, qmax] (for int4 linears, the one of a few clipped ranges with
the least squared error, `fit`), and values are rounded by torch's own
`quantize_per_channel_group` (half to even). The forms:

- int4 linear (`int8-dynamic-int4-weight`): `choose_qparams_per_token_asymmetric` →
  `quantize_per_token` → `dequantize_per_token` on the input (also given to a linear the
  accuracy search raises from int4 to int8, `per_token_inputs`) (int8 per token, as XNNPACK's
  dynamic linear takes it) and `dequantize_per_channel_group` (range [-8, 7], groups of
  `group_size` along the input dimension, scales rounded up to bfloat16 as XNNPACK keeps them)
  on the weight. ExecuTorch runs int4 linear weights only inside the XNNPACK delegate, which
  fuses this pattern.
- embeddings: `dequantize_per_channel_group` → `embedding`, int8 (range [-128, 127], one scale
  per row) or int4 (range [-8, 7], groups of `group_size` along the row when it divides the
  row, else one per row; full-range scales: fitting them as int4 linears' are fitted did not
  lift the LLM benchmark's SNR, docs/llm.md). Lowering fuses the pair into ExecuTorch's
  `embedding_byte` / `embedding_4bit` (`etbuild/lowering/quantized_embeddings.py`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import GraphModule, Node

from etbuild.errors import StageError
from etbuild.quantize.modules import MODULE_STACK, module_path

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed

INT4_RANGE = (-8, 7)
INT8_RANGE = (-128, 127)
EPS = 2**-12
_CONSTANT_PREFIX = "_etbuild_q"


CLIP_RATIOS = tuple(1 - k / 32 for k in range(16))
"""The clipping ratios a fitted group scale tries: 1 (the group's full range) down to 0.53."""


def group_quantize(
    weight: torch.Tensor, group_size: int, qrange: tuple[int, int], bf16_scales: bool = False, fit: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """A 2-d float weight as int8 values in `qrange` and float32 scales of shape (rows, columns // group_size);
    with `bf16_scales`, each scale rounded up to a bfloat16 value (see `bf16_ceil`); with `fit`, each
    group's scale is the one of `CLIP_RATIOS` times its full-range scale whose quantize → dequantize
    of the group has the least squared error (clipping a rare large value can cost less than the
    coarser steps that keep it)."""
    qmin, qmax = qrange
    scales = group_scales(weight, group_size, qrange, bf16_scales, fit)
    zeros = torch.zeros_like(scales, dtype=torch.int64)
    q = qd.quantize_per_channel_group(weight.detach().float(), scales, zeros, qmin, qmax, torch.int8, group_size)
    return q, scales


def group_scales(weight: torch.Tensor, group_size: int, qrange: tuple[int, int], bf16_scales: bool = False,
                 fit: bool = True) -> torch.Tensor:
    """The float32 scales (rows, columns // group_size) `group_quantize` gives `weight` (a trailing
    partial group is ignored)."""
    qmin, qmax = qrange
    rows, columns = weight.shape
    groups = weight.detach().float()[:, : columns // group_size * group_size].reshape(rows, -1, group_size)
    full = torch.maximum(groups.amax(-1) / qmax, groups.amin(-1) / qmin).clamp(min=EPS)
    return _fitted(groups, full, qrange, bf16_scales) if fit else _rounded(full, bf16_scales)


def _rounded(scales: torch.Tensor, bf16_scales: bool) -> torch.Tensor:
    return bf16_ceil(scales) if bf16_scales else scales


def _fitted(groups: torch.Tensor, full: torch.Tensor, qrange: tuple[int, int], bf16_scales: bool) -> torch.Tensor:
    """Per group, the scale of `CLIP_RATIOS` × `full` with the least squared reconstruction error."""
    best_scale, best_error = full, None
    for ratio in CLIP_RATIOS:
        scale = _rounded((full * ratio).clamp(min=EPS), bf16_scales)
        step = scale.unsqueeze(-1)
        error = ((torch.round(groups / step).clamp(*qrange) * step - groups) ** 2).sum(-1)
        if best_error is None:
            best_scale, best_error = scale, error
            continue
        better = error < best_error
        best_scale, best_error = torch.where(better, scale, best_scale), torch.where(better, error, best_error)
    return best_scale


def bf16_ceil(scales: torch.Tensor) -> torch.Tensor:
    """Positive float32 scales rounded up to the nearest bfloat16 value (clearing the low 16 bits of
    the float32 pattern, carrying into the high ones). XNNPACK keeps int4 group scales in bfloat16
    (XNNPACK-FORMAT.md §4), so the converted model computes with the scales the delegate gets, and
    rounding up keeps every value of a group within its range."""
    bits = scales.contiguous().view(torch.int32).to(torch.int64)
    return ((bits + 0xFFFF) & ~0xFFFF).to(torch.int32).view(torch.float32)


def _constant(gm: GraphModule, tensor: torch.Tensor) -> Node:
    """A get_attr node for a new buffer of `gm` holding `tensor`."""
    name = f"{_CONSTANT_PREFIX}{len([b for b in gm._buffers if b.startswith(_CONSTANT_PREFIX)])}"
    gm.register_buffer(name, tensor)
    return gm.graph.get_attr(name)


def _call(gm: GraphModule, op: Any, args: tuple[Any, ...], like: Node) -> Node:
    node = gm.graph.call_function(op, args)
    if MODULE_STACK in like.meta:
        node.meta[MODULE_STACK] = like.meta[MODULE_STACK]
    return node


def _weight(gm: GraphModule, node: Node, index: int) -> torch.Tensor | None:
    """The float 2-d constant at argument `index` of `node`, or None."""
    arg = node.args[index]
    if not (isinstance(arg, Node) and arg.op == "get_attr"):
        return None
    value = gm.get_parameter(arg.target) if arg.target in dict(gm.named_parameters()) else gm.get_buffer(arg.target)
    return value if value.is_floating_point() and value.dim() == 2 else None


WeightQuantizer = Callable[[Node, torch.Tensor, int, tuple[int, int]], tuple[torch.Tensor, torch.Tensor] | None]
"""Quantizes the weight of a linear node in groups of a size to a range: int8 values and scales, or
None for plain rounding (`group_quantize`, fitted, bfloat16 scales); GPTQ is one (`etbuild.quantize.gptq`)."""


def _dequantized(gm: GraphModule, node: Node, weight: torch.Tensor, group: int, qrange: tuple[int, int],
                 bf16_scales: bool = False, fit: bool = False,
                 quantized: tuple[torch.Tensor, torch.Tensor] | None = None) -> Node:
    """Nodes computing `weight` back from its int8 groups (`quantized`, or those of `group_quantize`),
    inserted before `node`."""
    q, scales = quantized if quantized is not None else group_quantize(weight, group, qrange, bf16_scales, fit)
    with gm.graph.inserting_before(node):
        args = (_constant(gm, q), _constant(gm, scales), None, *qrange, torch.int8, group, torch.float32)
        return _call(gm, qd.dequantize_per_channel_group.default, args, node)


def int4_linears(gm: GraphModule, wanted: Callable[[Node], bool], group_size: int,
                 quantizer: WeightQuantizer | None = None) -> int:
    """Rewrite each wanted linear with a constant weight to int4 weights (by `quantizer` when it gives them)
    and int8 per-token inputs; the count."""
    count = 0
    for node in list(gm.graph.nodes):
        weight = _weight(gm, node, 1) if node.target is aten.linear.default and wanted(node) else None
        if weight is None:
            continue
        if weight.shape[1] % group_size:
            raise StageError(
                f"linear {module_path(node) or node.name} has {weight.shape[1]} input features, not a multiple of "
                f"quantize.group_size {group_size}; choose a group size that divides it"
            )
        xdq = _per_token(gm, node.args[0], node)
        quantized = quantizer(node, weight, group_size, INT4_RANGE) if quantizer is not None else None
        wq = _dequantized(gm, node, weight, group_size, INT4_RANGE, bf16_scales=True, fit=True, quantized=quantized)
        node.args = (xdq, wq, *node.args[2:])
        count += 1
    return count


def _per_token(gm: GraphModule, x: Any, node: Node) -> Node:
    """Nodes quantizing `x` to int8 per token and back, inserted before `node`."""
    with gm.graph.inserting_before(node):
        qparams = _call(gm, qd.choose_qparams_per_token_asymmetric.default, (x, torch.int8), node)
        scale, zero = (_call(gm, operator.getitem, (qparams, i), node) for i in (0, 1))
        per_token = (scale, zero, *INT8_RANGE, torch.int8)
        xq = _call(gm, qd.quantize_per_token.default, (x, *per_token), node)
        return _call(gm, qd.dequantize_per_token.default, (xq, *per_token, torch.float32), node)


def per_token_inputs(gm: GraphModule, wanted: Callable[[Node], bool]) -> int:
    """Give each wanted linear whose input is quantized dynamically per tensor the int8 per-token
    input of an int4 linear instead (a linear the accuracy search raised from int4 to int8 keeps
    its scheme's activations, as XNNPACK runs both); the count."""
    count = 0
    for node in list(gm.graph.nodes):
        dq = node.args[0] if node.target is aten.linear.default and wanted(node) else None
        if isinstance(dq, Node) and dq.target is qd.dequantize_per_tensor.tensor and isinstance(dq.args[0], Node):
            node.args = (_per_token(gm, dq.args[0].args[0], node), *node.args[1:])
            count += 1
    if count:
        gm.graph.eliminate_dead_code()  # the per-tensor chains no other node reads
    return count


def embeddings(gm: GraphModule, bits: int, wanted: Callable[[Node], bool], group_size: int) -> int:
    """Store each wanted embedding table with a constant weight as int8 or int4; the count."""
    qrange = INT8_RANGE if bits == 8 else INT4_RANGE
    count = 0
    for node in list(gm.graph.nodes):
        weight = _weight(gm, node, 0) if node.target is aten.embedding.default and wanted(node) else None
        if weight is None:
            continue
        columns = weight.shape[1]
        if bits == 4 and columns % 2:
            raise StageError(f"embedding {module_path(node) or node.name} has an odd row length {columns}; "
                             "int4 tables pack two values per byte")
        group = group_size if bits == 4 and columns % group_size == 0 else columns
        node.args = (_dequantized(gm, node, weight, group, qrange), *node.args[1:])
        count += 1
    return count


def drop_unused_constants(gm: GraphModule) -> None:
    """Delete parameters and buffers no get_attr reads (the float weights conversion replaced)."""
    used = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    for name in [n for n, _ in (*gm.named_parameters(), *gm.named_buffers()) if n not in used]:
        owner_path, _, attr = name.rpartition(".")
        owner = gm.get_submodule(owner_path) if owner_path else gm
        delattr(owner, attr)
    gm.recompile()
