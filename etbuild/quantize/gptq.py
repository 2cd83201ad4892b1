"""GPTQ: int4 group-quantized linear weights with their rounding error compensated on calibration inputs.

Rounding each weight to its nearest level (`weights.group_quantize`) minimises the error of the
weight; what a linear layer's output loses is ‖(W − Ŵ)X‖², which depends on its inputs X. GPTQ
(Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained Transformers",
2022) quantizes the input columns one after the other and, after each, moves the remaining columns
to cancel what its rounding cost on the inputs seen, with the inverse of H = 2XᵀX/N:

- H from the calibration activations of the layer's input (`recording`), dampened by
  `DAMPING` × its mean diagonal (columns that never saw a non-zero input are quantized to 0);
- the upper Cholesky factor U of H⁻¹; column j is rounded, its error e = (w_j − ŵ_j)/U_jj, and the
  columns after it get −e·U_j,k (in blocks of `BLOCK` columns, the later blocks updated once per block);
- each group's scale is chosen when the loop reaches the group's first column, from the group's
  columns as they are then (compensated), by the same clipping search and bfloat16 rounding as plain
  rounding (`weights.group_scales`); with `act_order`, columns go by decreasing H diagonal and the
  groups' scales are chosen from the original weights first (groups stay contiguous, as XNNPACK reads them).

The result is the same form as plain rounding: int8 values in the range and float32 scales per group.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule, Node

from etbuild.quantize.weights import WeightQuantizer, group_scales

aten = torch.ops.aten
DAMPING = 0.01
"""The fraction of H's mean diagonal added to its diagonal (the paper's default)."""
BLOCK = 128
"""Columns updated together before the rest of the matrix is (a multiple of every group size up to it)."""


FLUSH_ROWS = 512
"""Rows of a value gathered before they are added to its Σxxᵀ in one product (a decode step gives one row a
call: one rank-one update a call would read and write the whole d×d sum each time)."""


@dataclass
class Hessians:
    """Per input value (by node name), the running Σxxᵀ of its rows; per linear node, the value it reads."""

    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    pending: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def add(self, source: str, x: torch.Tensor) -> None:
        """Add the rows of `x` (the value `source`, the last dim the features)."""
        rows = x.detach().reshape(-1, x.shape[-1]).double()  # a copy: the graph may reuse x's memory
        waiting = self.pending.setdefault(source, [])
        waiting.append(rows)
        self.counts[source] = self.counts.get(source, 0) + rows.shape[0]
        if len(waiting) * rows.shape[0] >= FLUSH_ROWS:  # calls of one value give rows of one count
            self._flush(source)

    def flush(self) -> None:
        """Add every gathered row to its sum."""
        for source in list(self.pending):
            self._flush(source)

    def _flush(self, source: str) -> None:
        waiting = self.pending.pop(source, [])
        if not waiting:
            return
        rows = torch.cat(waiting)
        total = self.sums.get(source)
        self.sums[source] = rows.T @ rows if total is None else total.addmm_(rows.T, rows)

    def of(self, linear: str) -> torch.Tensor | None:
        """H = 2XᵀX/N of `linear`'s input (None: it saw no input)."""
        source = self.inputs.get(linear)
        if source is None or not self.counts.get(source):
            return None
        self._flush(source)
        return (2 * self.sums[source] / self.counts[source]).float()


class _Tap(torch.nn.Module):
    """A graph call that adds the value it is given to `hessians`."""

    def __init__(self, hessians: Hessians, source: str) -> None:
        super().__init__()
        self.hessians, self.source = hessians, source

    def forward(self, x: torch.Tensor) -> None:
        self.hessians.add(self.source, x)


_TAP = "_etbuild_gptq_tap"


@contextlib.contextmanager
def recording(gm: GraphModule, wanted: Callable[[Node], bool]) -> Iterator[Hessians]:
    """Meanwhile, every run of `gm` (its forward or an Interpreter) adds the inputs of its `wanted`
    linears to the Hessians yielded: a call to a tap module after each value they read (one for
    linears that read the same value), removed afterwards."""
    hessians, taps = Hessians(), {}
    for node in list(gm.graph.nodes):
        source = node.args[0] if node.op == "call_function" and node.target is aten.linear.default else None
        if not (isinstance(source, Node) and wanted(node)):
            continue
        hessians.inputs[node.name] = source.name
        if source.name not in taps:
            name = f"{_TAP}{len(taps)}"
            gm.add_submodule(name, _Tap(hessians, source.name))
            with gm.graph.inserting_before(node):
                taps[source.name] = gm.graph.call_module(name, (source,))
    if not taps:
        yield hessians
        return
    gm.recompile()
    try:
        yield hessians
    finally:
        hessians.flush()
        for tap in taps.values():
            gm.graph.erase_node(tap)
            gm.delete_submodule(str(tap.target))
        gm.recompile()


def gptq_quantize(weight: torch.Tensor, hessian: torch.Tensor, group_size: int, qrange: tuple[int, int],
                  bf16_scales: bool = True, act_order: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`weight` [rows, columns] as int8 values in `qrange` and float32 scales [rows, columns // group_size],
    its rounding error compensated by `hessian` [columns, columns] (see the module docstring)."""
    with _one_thread():
        return _gptq(weight.detach().float().clone(), hessian.detach().float().clone(), group_size, qrange,
                     bf16_scales, act_order)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Torch on one thread meanwhile: the column loop runs thousands of small ops, which torch's
    thread split made far slower (`round` of 8 K values: 11 ms on two threads, 2.5 µs on one, on 2
    shared cores under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _gptq(w: torch.Tensor, h: torch.Tensor, group_size: int, qrange: tuple[int, int], bf16_scales: bool,
          act_order: bool) -> tuple[torch.Tensor, torch.Tensor]:
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    order = torch.argsort(torch.diag(h), descending=True, stable=True) if act_order else None
    scales = group_scales(w, group_size, qrange, bf16_scales) if act_order else torch.empty(
        w.shape[0], w.shape[1] // group_size)
    if order is not None:
        w, h = w[:, order], h[order][:, order]
    q = _compensated(w, _inverse_factor(h), scales, group_size, qrange, bf16_scales, order)
    if order is not None:
        q = q[:, torch.argsort(order)]
    return q.to(torch.int8), scales


def _inverse_factor(h: torch.Tensor) -> torch.Tensor:
    """The upper Cholesky factor of (H + damping)⁻¹, the damping raised tenfold until H factors."""
    damp = DAMPING * torch.diag(h).mean()
    eye = torch.eye(h.shape[0])
    for _ in range(6):
        factor, info = torch.linalg.cholesky_ex(h + damp * eye)
        if int(info) == 0:
            inverse = torch.cholesky_inverse(factor)
            upper, info = torch.linalg.cholesky_ex(inverse, upper=True)
            if int(info) == 0:
                return upper
        damp = damp * 10
    return torch.eye(h.shape[0])  # no compensation: each column rounded alone


def _compensated(w: torch.Tensor, u: torch.Tensor, scales: torch.Tensor, group_size: int,
                 qrange: tuple[int, int], bf16_scales: bool, order: torch.Tensor | None) -> torch.Tensor:
    """The quantized columns of `w` (in its column order), each column's error spread over the later ones."""
    columns = w.shape[1]
    q = torch.zeros_like(w)
    block = max(BLOCK // group_size, 1) * group_size
    for start in range(0, columns, block):
        end = min(start + block, columns)
        chunk, errors = w[:, start:end].clone(), torch.zeros(w.shape[0], end - start)
        for i in range(end - start):
            column = start + i
            if order is None and column % group_size == 0:
                scales[:, column // group_size] = group_scales(chunk[:, i:i + group_size], group_size, qrange,
                                                               bf16_scales)[:, 0]
            scale = scales[:, (column if order is None else int(order[column])) // group_size]
            q[:, column] = torch.round(chunk[:, i] / scale).clamp(*qrange)
            error = (chunk[:, i] - q[:, column] * scale) / u[column, column]
            chunk[:, i:] -= error.unsqueeze(1) * u[column, column:end].unsqueeze(0)
            errors[:, i] = error
        w[:, end:] -= errors @ u[start:end, end:]
    return q


def quantizer(hessians: Hessians, act_order: bool = False) -> WeightQuantizer:
    """What `weights.int4_linears` quantizes a linear's weight with: GPTQ on its recorded H (None: the
    linear saw no calibration input, and is rounded plainly)."""

    def quantize(node: Node, weight: torch.Tensor, group_size: int,
                 qrange: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor] | None:
        hessian = hessians.of(node.name)
        if hessian is None:
            return None
        return gptq_quantize(weight, hessian, group_size, qrange, bf16_scales=True, act_order=act_order)

    return quantize
