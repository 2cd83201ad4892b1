"""etbuild's decompositions: operators the target runtime lacks, written with operators it has.

Each is a plain function in torch ops, registered with `@decomposes(op, ...)`, which the
fit-operator-set step traces in place of the call (`ExportedProgram.run_decompositions`).
An operator without one of ours falls back to torch's decomposition table. `EXCLUDED` lists,
in one place, the core ATen operators that have neither a kernel nor a decomposition, each
with the reason; `tests/etbuild/lowering/test_operator_set.py` derives the core set from torch
and checks that every operator of it is available, decomposed or excluded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import decomposition_table
from torch._ops import OpOverload

aten = torch.ops.aten
Decomposition = Callable[..., Any]

DECOMPOSITIONS: dict[OpOverload, Decomposition] = {}


def decomposes(*ops: OpOverload) -> Callable[[Decomposition], Decomposition]:
    """Register fn as etbuild's decomposition of each of `ops`."""

    def register(fn: Decomposition) -> Decomposition:
        for op in ops:
            if op in DECOMPOSITIONS:
                raise ValueError(f"{op} already has a decomposition: {DECOMPOSITIONS[op].__name__}")
            DECOMPOSITIONS[op] = fn
        return fn

    return register


def decomposition_of(op: OpOverload) -> Decomposition | None:
    """etbuild's decomposition of `op`, else torch's table's, else its composite kernel's, else None."""
    found = DECOMPOSITIONS.get(op) or decomposition_table.get(op)
    if found is None and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return op.decompose
    return found


# ------------------------------------------------------------------ creation, elementwise, scans


@decomposes(aten.empty_strided.default)
def empty_strided(
    size: list[int], stride: list[int], *, dtype: torch.dtype | None = None, layout: Any = None,
    device: Any = None, pin_memory: bool | None = None,
) -> torch.Tensor:
    """An uninitialised tensor: a program's tensors are dense, and nothing is in it to lay out."""
    return aten.empty.memory_format(size, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


@decomposes(aten.empty_permuted.default)
def empty_permuted(
    size: list[int], physical_layout: list[int], *, dtype: torch.dtype | None = None, layout: Any = None,
    device: Any = None, pin_memory: bool | None = None,
) -> torch.Tensor:
    """An uninitialised tensor (what `empty_like` becomes), dense as every tensor of a program."""
    return empty_strided(size, [], dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


@decomposes(aten.exp2.default)
def exp2(x: torch.Tensor) -> torch.Tensor:
    """2 ** x (torch's own decomposition calls a prim)."""
    return aten.pow.Scalar(2.0, x)


@decomposes(aten.round.decimals)
def round_decimals(x: torch.Tensor, *, decimals: int = 0) -> torch.Tensor:
    """Round half to even at `decimals` places, scaling as torch's CPU kernel does."""
    if decimals >= 0:
        scale = 10.0**decimals
        return aten.div.Tensor(aten.round.default(aten.mul.Tensor(x, scale)), scale)
    scale = 10.0 ** (-decimals)
    return aten.mul.Tensor(aten.round.default(aten.div.Tensor(x, scale)), scale)


@decomposes(aten.cumprod.default)
def cumprod(x: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Running products in log2(n) steps: each multiplies by the values `shift` places before."""
    y = aten._to_copy.default(x, dtype=dtype) if dtype is not None else x
    n = y.shape[dim]
    shift = 1
    while shift < n:
        ones_shape = list(y.shape)
        ones_shape[dim] = shift
        before = aten.slice.Tensor(y, dim, 0, n - shift)
        y = aten.mul.Tensor(y, aten.cat.default([aten.full.default(ones_shape, 1, dtype=y.dtype), before], dim))
        shift *= 2
    return y


# ------------------------------------------------------------------ sorting


@decomposes(aten.sort.default)
def sort(x: torch.Tensor, dim: int = -1, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return sort_stable(x, stable=True, dim=dim, descending=descending)


@decomposes(aten.sort.stable)
def sort_stable(
    x: torch.Tensor, *, stable: bool | None = None, dim: int = -1, descending: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """A stable sort by rank: element i goes to the number of elements that sort before it.

    j sorts before i when it compares smaller (larger, descending) or equal with j < i; NaN
    sorts last (first, descending), as in torch. It takes n*n comparisons along `dim`: exact,
    and as stable as torch's stable sort, for the short rows models sort (top-k routing, ranks).
    """
    if x.dim() == 0:
        return aten.clone.default(x), aten.full.default([], 0, dtype=torch.int64)
    dim = dim % x.dim()
    xs = aten.permute.default(x, _to_last(x.dim(), dim))
    n = xs.shape[-1]
    a, b = aten.unsqueeze.default(xs, -1), aten.unsqueeze.default(xs, -2)  # a: element i, b: element j
    before = _sorts_before(b, a, descending, x.is_floating_point())
    position = aten.arange.default(n)
    earlier = aten.lt.Tensor(aten.unsqueeze.default(position, 0), aten.unsqueeze.default(position, 1))
    ties = _same(a, b, x.is_floating_point())
    ahead = aten.logical_or.default(before, aten.logical_and.default(ties, earlier))
    rank = aten.sum.dim_IntList(aten._to_copy.default(ahead, dtype=torch.int64), [-1])
    values = aten.scatter.src(aten.clone.default(xs), -1, rank, xs)
    indices = aten.scatter.src(aten.zeros_like.default(rank), -1, rank, aten.expand.default(position, rank.shape))
    back = _to_last(x.dim(), dim)
    inverse = [back.index(i) for i in range(x.dim())]
    return aten.permute.default(values, inverse), aten.permute.default(indices, inverse)


def _to_last(rank: int, dim: int) -> list[int]:
    return [d for d in range(rank) if d != dim] + [dim]


def _sorts_before(b: torch.Tensor, a: torch.Tensor, descending: bool, floating: bool) -> torch.Tensor:
    """Whether b sorts strictly before a; NaN is the largest value."""
    smaller = aten.gt.Tensor(b, a) if descending else aten.lt.Tensor(b, a)
    if not floating:
        return smaller
    nan_first, nan_second = (b, a) if descending else (a, b)
    nan_order = aten.logical_and.default(aten.isnan.default(nan_first), aten.logical_not.default(
        aten.isnan.default(nan_second)))
    return aten.logical_or.default(smaller, nan_order)


def _same(a: torch.Tensor, b: torch.Tensor, floating: bool) -> torch.Tensor:
    equal = aten.eq.Tensor(a, b)
    if not floating:
        return equal
    return aten.logical_or.default(equal, aten.logical_and.default(aten.isnan.default(a), aten.isnan.default(b)))


# ------------------------------------------------------------------ 3-D pooling, separably


def _triple(v: Any, default: Any = None) -> list[int]:
    v = default if (v is None or (isinstance(v, (list, tuple)) and not v)) else v
    return list(v) * 3 if isinstance(v, (list, tuple)) and len(v) == 1 else list(v) if isinstance(v, (list, tuple)) \
        else [v] * 3


def _batched(pool: Callable[..., Any]) -> Callable[..., Any]:
    """A 3-D pooling that takes (C, D, H, W) too, by adding and removing the batch dimension."""

    def run(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if x.dim() == 5:
            return pool(x, *args, **kwargs)
        out = pool(aten.unsqueeze.default(x, 0), *args, **kwargs)
        return tuple(aten.squeeze.dim(t, 0) for t in out) if isinstance(out, tuple) else aten.squeeze.dim(out, 0)

    run.__name__ = pool.__name__
    return run


@decomposes(aten.avg_pool3d.default)
@_batched
def avg_pool3d(
    x: torch.Tensor, kernel_size: list[int], stride: list[int] | None = None, padding: Any = 0,
    ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None,
) -> torch.Tensor:
    """An average over (H, W), then over D: the window's sum and its divisor both factor by dimension."""
    k, p = _triple(kernel_size), _triple(padding)
    s = _triple(stride, k)
    n, c, d, h, w = x.shape
    divisor = 1 if divisor_override is not None else None
    y = aten.avg_pool2d.default(aten.view.default(x, [n, c * d, h, w]), k[1:], s[1:], p[1:], ceil_mode,
                                count_include_pad, divisor)
    ho, wo = y.shape[-2:]
    y = aten.avg_pool2d.default(aten.view.default(y, [n, c, d, ho * wo]), [k[0], 1], [s[0], 1], [p[0], 0],
                                ceil_mode, count_include_pad, divisor)
    y = aten.view.default(y, [n, c, y.shape[2], ho, wo])
    return y if divisor_override is None else aten.div.Tensor(y, divisor_override)


@decomposes(aten._adaptive_avg_pool3d.default)
@_batched
def adaptive_avg_pool3d(x: torch.Tensor, output_size: list[int]) -> torch.Tensor:
    """An adaptive average over (H, W), then over D (the windows of each dimension are independent)."""
    n, c, d, h, w = x.shape
    od, oh, ow = _triple(output_size)
    y = aten._adaptive_avg_pool2d.default(aten.view.default(x, [n, c * d, h, w]), [oh, ow])
    y = aten._adaptive_avg_pool2d.default(aten.view.default(y, [n, c, d, oh * ow]), [od, oh * ow])
    return aten.view.default(y, [n, c, od, oh, ow])


@decomposes(aten.max_pool3d_with_indices.default)
@_batched
def max_pool3d_with_indices(
    x: torch.Tensor, kernel_size: list[int], stride: list[int] | None = None, padding: Any = 0,
    dilation: Any = 1, ceil_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A max over (H, W), then over D; the index is the D chosen times H*W plus the (H, W) index there.

    Both passes keep the first maximum in scan order, so the pair keeps the first in (D, H, W).
    """
    k, p, dil = _triple(kernel_size), _triple(padding), _triple(dilation)
    s = _triple(stride, k)
    n, c, d, h, w = x.shape
    y, inner = aten.max_pool2d_with_indices.default(aten.view.default(x, [n, c * d, h, w]), k[1:], s[1:], p[1:],
                                                    dil[1:], ceil_mode)
    ho, wo = y.shape[-2:]
    values, outer = aten.max_pool2d_with_indices.default(aten.view.default(y, [n, c, d, ho * wo]), [k[0], 1],
                                                         [s[0], 1], [p[0], 0], [dil[0], 1], ceil_mode)
    od = values.shape[2]
    flat_outer = aten.view.default(outer, [n, c, od * ho * wo])
    chosen = aten.gather.default(aten.view.default(inner, [n, c, d * ho * wo]), 2, flat_outer)
    depth = aten.div.Tensor_mode(flat_outer, ho * wo, rounding_mode="floor")
    index = aten.add.Tensor(aten.mul.Tensor(depth, h * w), chosen)
    shape = [n, c, od, ho, wo]
    return aten.view.default(values, shape), aten.view.default(index, shape)


# ------------------------------------------------------------------ reductions into places


def _fill_for(reduce: str, dtype: torch.dtype) -> float | int | bool:
    """The value that leaves a reduction unchanged: 0 for sums, 1 for products, ∓∞ (or the dtype's ends)."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype == torch.bool:
        return reduce == "amin"
    if dtype.is_floating_point:
        return -math.inf if reduce == "amax" else math.inf
    info = torch.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


_REDUCE = {"sum": aten.sum.dim_IntList, "mean": aten.sum.dim_IntList, "prod": aten.prod.dim_int,
           "amax": aten.amax.default, "amin": aten.amin.default}


@decomposes(aten.scatter_reduce.two)
def scatter_reduce(
    x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *, include_self: bool = True
) -> torch.Tensor:
    """Each place of `x` reduced with the `src` values scattered to it, densely: a one-hot of `index`
    along `dim` selects, per place, the values that reach it (memory: index.numel() * x.shape[dim])."""
    dim = dim % max(x.dim(), 1)
    src = _narrow_to(src, index.shape)
    places = aten.arange.default(x.shape[dim])
    hits = aten.eq.Tensor(aten.unsqueeze.default(index, -1), places)  # [*index.shape, x.shape[dim]]
    spread = _where(hits, aten.unsqueeze.default(src, -1), _fill_for(reduce, src.dtype))
    reduced = aten.movedim.int(_reduce_dim(spread, dim, reduce), -1, dim)
    count = aten.movedim.int(aten.sum.dim_IntList(aten._to_copy.default(hits, dtype=torch.int64), [dim]), -1, dim)
    reduced, count = _pad_to(reduced, x.shape, 0), _pad_to(count, x.shape, 0)
    reached = aten.gt.Scalar(count, 0)
    if include_self:
        reduced = _combine(x, reduced, reduce)
        count = aten.add.Tensor(count, 1)
    if reduce == "mean":
        reduced = _mean(reduced, count, x.dtype)
    return aten.where.self(reached, aten._to_copy.default(reduced, dtype=x.dtype), x)


def _where(condition: torch.Tensor, t: torch.Tensor, value: float | int | bool) -> torch.Tensor:
    """`t` where `condition` holds, else the scalar `value` (as a 0-d tensor of t's dtype)."""
    return aten.where.self(condition, t, aten.scalar_tensor.default(value, dtype=t.dtype))


def _reduce_dim(t: torch.Tensor, dim: int, reduce: str) -> torch.Tensor:
    op = _REDUCE[reduce]
    return op(t, dim) if reduce == "prod" else op(t, [dim])


def _combine(x: torch.Tensor, reduced: torch.Tensor, reduce: str) -> torch.Tensor:
    pair = aten.stack.default([x, aten._to_copy.default(reduced, dtype=x.dtype)])
    return _reduce_dim(pair, 0, reduce)


def _mean(total: torch.Tensor, count: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return aten.div.Tensor(total, count)
    return aten.div.Tensor_mode(total, count, rounding_mode="floor")


def _narrow_to(t: torch.Tensor, shape: Any) -> torch.Tensor:
    for d, size in enumerate(shape):
        if t.shape[d] != size:
            t = aten.slice.Tensor(t, d, 0, size)
    return t


def _pad_to(t: torch.Tensor, shape: Any, value: float) -> torch.Tensor:
    """Pad at the end of each dimension up to `shape` (index may cover less of x than x's shape)."""
    pad: list[int] = []
    for d in reversed(range(t.dim())):
        pad += [0, shape[d] - t.shape[d]]
    return aten.constant_pad_nd.default(t, pad, value) if any(pad) else t


# ------------------------------------------------------------------ embedding bags


@decomposes(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(
    weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, scale_grad_by_freq: bool = False,
    mode: int = 0, sparse: bool = False, per_sample_weights: torch.Tensor | None = None,
    include_last_offset: bool = False, padding_idx: int = -1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bags of 1-D `indices` cut at `offsets`, summed (0), averaged (1) or maxed (2) through a
    bag × index membership matrix; the other three results are torch's CPU ones (offset2bag,
    bag_size, max_indices)."""
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    starts = aten.slice.Tensor(offsets, 0, 0, bags)
    position = aten.arange.default(indices.shape[0])
    bag_of = aten.sub.Tensor(aten.sum.dim_IntList(aten._to_copy.default(
        aten.le.Tensor(aten.unsqueeze.default(starts, 0), aten.unsqueeze.default(position, 1)), dtype=torch.int64),
        [1]), 1)
    member = aten.eq.Tensor(aten.unsqueeze.default(aten.arange.default(bags), 1), aten.unsqueeze.default(bag_of, 0))
    if padding_idx >= 0:
        member = aten.logical_and.default(member, aten.ne.Scalar(indices, padding_idx))
    rows = aten.embedding.default(weight, indices)
    if per_sample_weights is not None:
        rows = aten.mul.Tensor(rows, aten.unsqueeze.default(per_sample_weights, 1))
    size = aten.sum.dim_IntList(aten._to_copy.default(member, dtype=torch.int64), [1])
    zeros = aten.full.default([bags], 0, dtype=torch.int64)
    if mode == 2:
        out, max_indices = _bag_max(rows, member, indices, size)
        return out, bag_of, size, max_indices
    out = aten.mm.default(aten._to_copy.default(member, dtype=rows.dtype), rows)
    if mode == 1:
        out = aten.div.Tensor(out, aten.unsqueeze.default(aten.clamp.default(size, 1), 1))
        return out, bag_of, size, size
    return out, aten.full.default([0], 0, dtype=torch.int64), zeros, zeros


def _bag_max(
    rows: torch.Tensor, member: torch.Tensor, indices: torch.Tensor, size: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each bag's column-wise max row (0 for an empty bag) and the index each max came from."""
    spread = _where(aten.unsqueeze.default(member, -1), aten.unsqueeze.default(rows, 0), -math.inf)
    best = aten.argmax.default(spread, 1)  # [bags, D]: position in indices
    nonempty = aten.unsqueeze.default(aten.gt.Scalar(size, 0), 1)
    out = _where(nonempty, aten.amax.default(spread, [1]), 0)
    max_indices = _where(nonempty, aten.index.Tensor(indices, [best]), 0)
    return aten._to_copy.default(out, dtype=rows.dtype), max_indices


# ------------------------------------------------------------------ what is neither kernel nor decomposition

_TRAINING = "training only: a gradient, which an inference graph does not compute"
_STRIDES = ("tensor metadata the program format does not have: every tensor of a program is dense in its "
            "dim order, so no call asks for strides, storage offsets or contiguity")
_COMPLEX = "complex tensors: etbuild's runtime has no complex dtypes yet (ExecuTorch's has this kernel)"
EXCLUDED: dict[OpOverload, str] = {
    aten.randperm.default: "random: a permutation no eager run reproduces, so verify could not check it; "
                           "ExecuTorch's kernel library has none",
    aten._fft_r2c.default: _COMPLEX,
    aten._fft_c2r.default: _COMPLEX,
    aten.sym_stride.int: _STRIDES,
    aten.sym_storage_offset.default: _STRIDES,
    aten.sym_is_contiguous.default: _STRIDES,
    aten.resize_.default: "resizes a tensor in place: a program's tensors have planned sizes",
}


def exclusion(op: OpOverload) -> str | None:
    """Why `op` has neither a kernel nor a decomposition, or None when it is not excluded."""
    if op._schema.name.endswith("_backward"):
        return _TRAINING
    return EXCLUDED.get(op)
