"""Kernel conformance: every registered kernel against the torch operator it implements.

One helper (`check`) does the comparison for every op: it builds torch inputs from the op's
case generator, runs torch (the functional overload matching the out-variant's arguments,
the out-variant itself when a case fixes the out dtypes, or the spec's own reference), turns
the inputs into numpy the way the runtime passes them (strides kept, dtypes as ScalarType
codes), allocates outs of the expected shape and dtype (contiguous, strided, or dynamically
bounded with a wrong initial shape), calls the kernel and compares: exactly for integers and
bools, with dtype-scaled tolerances for floats. Inputs must come back unchanged.

`SPECS` maps each kernel name to its cases; a registered kernel without a spec fails the
coverage test. `python -m etbuild.conformance` prints the operator × dtype table.
"""

from __future__ import annotations

import argparse
import math
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

import numpy as np
import torch

from etbuild.kernels.registry import KernelInfo, load_all
from etbuild.runtime.tensor import bounded, scalar_type

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
TOLERANCE: dict[torch.dtype, tuple[float, float]] = {  # (rtol, atol)
    torch.float16: (1e-3, 1e-3),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}
MEMORY_FORMATS = {
    torch.contiguous_format: 0,
    torch.preserve_format: 1,
    torch.channels_last: 2,
    torch.channels_last_3d: 3,
}
LAYOUTS = ("contiguous", "strided", "bounded")


# ---------------------------------------------------------------------------- inputs


class Gen:
    """Seeded random torch inputs for one (operator, dtype); `dtype` is the one under test."""

    def __init__(self, name: str, dtype: torch.dtype | None) -> None:
        self.dtype = dtype if dtype is not None else torch.float32
        self.g = torch.Generator().manual_seed(zlib.crc32(f"{name}/{dtype}".encode()))
        self.is_float = self.dtype.is_floating_point
        self.is_bool = self.dtype == torch.bool

    def t(
        self,
        shape: Sequence[int],
        dtype: torch.dtype | None = None,
        layout: str = "c",
        low: float | None = None,
        high: float | None = None,
    ) -> torch.Tensor:
        """A random tensor; layout c(ontiguous), t(ransposed), cl (channels-last), s(trided)."""
        dtype = dtype or self.dtype
        if layout == "t":
            return self.t(tuple(reversed(shape)), dtype, "c", low, high).permute(*reversed(range(len(shape))))
        if layout == "s":
            wide = (*shape[:-1], 2 * shape[-1])
            return self.t(wide, dtype, "c", low, high)[..., ::2]
        x = self.values(shape, dtype, low, high)
        if layout == "cl":
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def values(self, shape: Sequence[int], dtype: torch.dtype, low: float | None, high: float | None) -> torch.Tensor:
        shape = tuple(shape)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=self.g).bool()
        if dtype.is_floating_point:
            lo, hi = (-3.0, 3.0) if low is None else (low, high)
            x = torch.rand(shape, generator=self.g, dtype=torch.float64) * (hi - lo) + lo
            return x.to(dtype)
        lo = -5 if low is None else int(low)
        lo = max(lo, 0) if dtype == torch.uint8 else lo
        return torch.randint(lo, 6 if high is None else int(high), shape, generator=self.g).to(dtype)

    def nonzero(self, shape: Sequence[int], dtype: torch.dtype | None = None, layout: str = "c") -> torch.Tensor:
        """Random values away from zero (divisors)."""
        x = self.t(shape, dtype, layout, 1, 5)
        if (dtype or self.dtype) in (torch.uint8, torch.bool):
            return x
        sign = torch.randint(0, 2, x.shape, generator=self.g) * 2 - 1
        return x * sign.to(x.dtype)

    def index(self, shape: Sequence[int], bound: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.randint(0, max(bound, 1), tuple(shape), generator=self.g).to(dtype)

    def special(self) -> torch.Tensor:
        """IEEE special values and extremes (float dtypes only)."""
        vals = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 1e-3, 30.0, -30.0]
        return torch.tensor(vals, dtype=torch.float64).to(self.dtype)

    def scalars(self, bools: bool = True) -> list[bool | int | float]:
        """Python scalars that exercise promotion against the dtype under test."""
        if self.is_bool:
            return [True, 3, 1.5] if bools else [3, 1.5]
        if self.is_float:
            return [2, -1.5, True] if bools else [2, -1.5]
        return [2, -3, 1.5]

    def partner(self) -> list[torch.Tensor]:
        """Second operands of another dtype: promotion by category and by 0-d rank."""
        if self.is_float:
            return [self.t((3, 4), torch.int32), self.t((), torch.float64)]
        if self.is_bool:
            return [self.t((3, 4), torch.int32), self.t((), torch.float32)]
        return [self.t((3, 4), torch.int64), self.t((), torch.float32)]


UNARY_SHAPES: list[tuple[tuple[int, ...], str]] = [
    ((), "c"),
    ((0,), "c"),
    ((7,), "c"),
    ((3, 5), "c"),
    ((3, 5), "t"),
    ((2, 3, 4, 5), "cl"),
    ((4, 6), "s"),
    ((1, 1, 3), "c"),
]
BINARY_SHAPES: list[tuple[tuple[int, ...], str, tuple[int, ...], str]] = [
    ((3, 4), "c", (3, 4), "c"),
    ((3, 4), "c", (4,), "c"),
    ((2, 1, 4), "c", (3, 1), "c"),
    ((), "c", (5,), "c"),
    ((5,), "c", (), "c"),
    ((0, 3), "c", (1, 3), "c"),
    ((2, 3, 4), "t", (2, 3, 4), "c"),
    ((2, 3, 4, 5), "cl", (1, 3, 1, 1), "c"),
]


@dataclass(frozen=True)
class Case:
    """One call: torch arguments in schema order without the outs.

    `out_dtypes` makes the reference the torch out-variant with outs of those dtypes.
    """

    args: tuple[Any, ...]
    out_dtypes: tuple[torch.dtype, ...] | None = None


CaseFn = Callable[[Gen], Iterable[Case]]


def unary(g: Gen, *extra: Any, special: bool = True) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES:
        yield Case((g.t(shape, layout=layout), *extra))
    if special and g.is_float:
        yield Case((g.special(), *extra))


def pairs(g: Gen, divisor: bool = False, mixed: bool = True) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    rhs = g.nonzero if divisor else g.t
    for sa, la, sb, lb in BINARY_SHAPES:
        yield g.t(sa, layout=la), rhs(sb, layout=lb)
    if mixed:
        for other in g.partner():
            other = other.abs() + 1 if divisor and not other.dtype.is_floating_point else other
            yield g.t((3, 4)), other
    if g.is_float:
        yield g.special(), g.special().flip(0)


def binary(g: Gen, *extra: Any, divisor: bool = False, mixed: bool = True) -> Iterator[Case]:
    for a, b in pairs(g, divisor, mixed):
        yield Case((a, b, *extra))


def with_scalar(g: Gen, *extra: Any, divisor: bool = False, bools: bool = True) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES[:6]:
        for s in g.scalars(bools):
            if divisor and not s:
                continue
            yield Case((g.t(shape, layout=layout), s, *extra))


# ---------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class OpSpec:
    """How to test one kernel.

    cases: inputs per dtype. ref: expected result from a case, instead of torch's op.
    run: calls the kernel itself (for ops the generic call cannot express).
    tol: multiplies the dtype's tolerances. mutates: argument positions the op may write.
    values: False compares only shapes and dtypes (random or uninitialized results).
    """

    cases: CaseFn
    ref: Callable[[Case], Any] | None = None
    run: Callable[[Callable[..., Any], list[Any]], Any] | None = None
    tol: float = 1.0
    mutates: tuple[int, ...] = ()
    outs: str | None = None  # "tensor" | "tensors" | "list" | "none"; None: from the torch schema
    values: bool = True


SPECS: dict[str, OpSpec] = {}


def spec(names: str | Iterable[str], cases: CaseFn, **kw: Any) -> None:
    """Register one spec for one or several kernel names."""
    for name in [names] if isinstance(names, str) else names:
        if name in SPECS:
            raise ValueError(f"conformance spec for {name} is defined twice")
        SPECS[name] = OpSpec(cases, **kw)


# ---------------------------------------------------------------------------- torch side


def torch_op(name: str) -> torch._ops.OpOverload | None:
    """The torch OpOverload of a kernel name, or None when torch does not define it."""
    ns, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), op), overload or "default")
    except (AttributeError, RuntimeError):
        return None


def out_args(op: torch._ops.OpOverload) -> list[Any]:
    return [a for a in op._schema.arguments if a.is_out]


def functional_overload(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The overload with the out-variant's arguments minus its outs (add.out -> add.Tensor)."""
    outs = out_args(op)
    if not outs:
        return op
    want = [(a.name, str(a.type)) for a in op._schema.arguments if not a.is_out]
    packet = getattr(getattr(torch.ops, op.namespace), op._schema.name.split("::")[1])
    for overload in packet.overloads():
        cand = getattr(packet, overload)
        args = cand._schema.arguments
        if any(a.is_out for a in args):
            continue
        if [(a.name, str(a.type)) for a in args] == want:
            return cand
    return None


def out_kind(name: str, sp: OpSpec) -> str:
    if sp.outs is not None:
        return sp.outs
    op = torch_op(name)
    if op is None:
        raise ValueError(f"{name}: torch does not define it; its spec must say `outs`")
    outs = out_args(op)
    if not outs:
        return "none"
    if str(outs[0].type) == "List[Tensor]":
        return "list"
    return "tensors" if len(outs) > 1 else "tensor"


def expected(name: str, sp: OpSpec, case: Case) -> Any:
    """The reference result of one case."""
    if sp.ref is not None:
        return sp.ref(case)
    op = torch_op(name)
    if op is None:
        raise ValueError(f"{name}: torch does not define it; its spec needs `ref`")
    if case.out_dtypes is not None:
        outs = {a.name: torch.empty(0, dtype=d) for a, d in zip(out_args(op), case.out_dtypes)}
        pos, kw = bind(op, case.args)
        result = op(*pos, **kw, **outs)
        return tuple(outs.values()) if len(outs) > 1 else result
    func = functional_overload(op)
    if func is None:
        raise ValueError(f"{name}: no functional overload; give the cases out_dtypes")
    pos, kw = bind(func, case.args)
    return func(*pos, **kw)


def bind(op: torch._ops.OpOverload, args: tuple[Any, ...]) -> tuple[list[Any], dict[str, Any]]:
    """Schema-ordered values as torch's call wants them: kwarg-only ones by name."""
    pos: list[Any] = []
    kw: dict[str, Any] = {}
    for a, v in zip([a for a in op._schema.arguments if not a.is_out], args):
        if a.kwarg_only:
            kw[a.name] = v
        else:
            pos.append(v)
    return pos, kw


# ---------------------------------------------------------------------------- numpy side


def to_kernel_arg(x: Any) -> Any:
    """A torch-side argument as the runtime passes it to a kernel."""
    if isinstance(x, torch.Tensor):
        return x.numpy()
    if isinstance(x, torch.dtype):
        return scalar_type(torch.empty(0, dtype=x).numpy().dtype)
    if isinstance(x, torch.memory_format):
        return MEMORY_FORMATS[x]
    if isinstance(x, (list, tuple)):
        return [to_kernel_arg(v) for v in x]
    return x


def sentinel(dtype: np.dtype) -> Any:
    return np.nan if dtype.kind == "f" else (True if dtype.kind == "b" else 7)


def alloc(shape: tuple[int, ...], dtype: np.dtype, layout: str) -> np.ndarray:
    """An out array of shape/dtype: contiguous, a strided view, or bounded with a wrong shape."""
    if layout == "bounded":
        numel = math.prod(shape)
        storage = np.zeros((numel + 1) * dtype.itemsize, dtype=np.uint8)
        return bounded(storage, dtype, (numel + 1,))
    if layout == "strided" and len(shape) >= 2:
        return np.full(shape[::-1], sentinel(dtype), dtype=dtype).T
    if layout == "strided" and len(shape) == 1:
        return np.full((2 * shape[0],), sentinel(dtype), dtype=dtype)[::2]
    return np.full(shape, sentinel(dtype), dtype=dtype)


def as_tuple(result: Any) -> tuple[Any, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def call_kernel(
    info: KernelInfo, sp: OpSpec, kind: str, args: list[Any], ref: Any, layout: str
) -> tuple[Any, list[Any]]:
    """Run the kernel on numpy args; returns (result, the out arrays passed)."""
    if sp.run is not None:
        return sp.run(info.fn, args), []
    if kind == "none":
        return info.fn(*args), []
    refs = as_tuple(ref)
    outs = [alloc(tuple(r.shape), r.numpy().dtype, layout) for r in refs]
    if kind == "list":
        return info.fn(*args, outs), outs
    return info.fn(*args, *outs), outs


def compare(actual: Any, want: Any, factor: float = 1.0, values: bool = True) -> str | None:
    """None when actual matches the torch result, else what differs.

    Floats compare with the tolerances of their dtype times `factor`; the rest exactly.
    """
    if not isinstance(want, torch.Tensor):
        if type(actual) is not type(want) and not (isinstance(want, float) and isinstance(actual, float)):
            return f"returned {actual!r} ({type(actual).__name__}), expected {want!r} ({type(want).__name__})"
        same = actual == want or (isinstance(want, float) and math.isnan(want) and math.isnan(actual))
        return None if same else f"returned {actual!r}, expected {want!r}"
    if not isinstance(actual, np.ndarray):
        return f"returned {type(actual).__name__}, expected an array"
    exp = want.numpy()
    if actual.shape != exp.shape or actual.dtype != exp.dtype:
        return f"returned {actual.dtype}{list(actual.shape)}, expected {exp.dtype}{list(exp.shape)}"
    if not values:
        return None
    if exp.dtype.kind != "f":
        bad = actual != exp
    else:
        rtol, atol = (t * factor for t in TOLERANCE[want.dtype])
        a, e = actual.astype(np.float64), exp.astype(np.float64)
        bad = ~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())}/{bad.size} elements differ; at {list(at)}: {actual[at]!r} vs expected {exp[at]!r}"


def check_returned(result: Any, outs: list[Any], kind: str, layout: str) -> str | None:
    """An out-variant returns its outs: the same arrays, or views of their bounded storage."""
    if kind in ("none",) or not outs:
        return None
    got = as_tuple(result)
    if len(got) != len(outs):
        return f"returned {len(got)} outputs, expected {len(outs)}"
    for r, o in zip(got, outs):
        if layout == "bounded":
            if o.storage.size and r.size and not np.shares_memory(r, o.storage):
                return "a result is not a view of the bounded out's storage"
        elif r is not o:
            return "an out-variant must return its out arrays"
    return None


def run_case(name: str, info: KernelInfo, sp: OpSpec, case: Case, layout: str) -> str | None:
    """The failure message of one case, or None.

    torch runs on clones of the arguments the op mutates, so that the kernel's writes into
    them can be compared with torch's.
    """
    ref_args = tuple(
        a.clone() if i in sp.mutates and isinstance(a, torch.Tensor) else a for i, a in enumerate(case.args)
    )
    try:
        ref = expected(name, sp, replace(case, args=ref_args))
    except Exception as e:  # torch rejecting a generated case is a harness bug, reported as such
        return f"torch rejected the case: {type(e).__name__}: {e}"
    args = [to_kernel_arg(a) for a in case.args]
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else None for a in args]
    kind = out_kind(name, sp)
    try:
        result, outs = call_kernel(info, sp, kind, args, ref, layout)
    except Exception as e:
        return f"kernel raised {type(e).__name__}: {e}"
    return check_returned(result, outs, kind, layout) or check_values(sp, result, ref, args, before, ref_args)


def check_values(
    sp: OpSpec, result: Any, ref: Any, args: list[Any], before: list[Any], ref_args: tuple[Any, ...]
) -> str | None:
    """Results against torch's, mutated arguments against torch's, the rest unchanged."""
    results, refs = as_tuple(result), as_tuple(ref)
    if len(results) != len(refs):
        return f"returned {len(results)} values, expected {len(refs)}"
    for k, (r, want) in enumerate(zip(results, refs)):
        if problem := compare(r, want, sp.tol, sp.values):
            return f"result {k}: {problem}" if len(refs) > 1 else problem
    for i, (a, b) in enumerate(zip(args, before)):
        if i in sp.mutates:
            if problem := compare(a, ref_args[i], sp.tol):
                return f"mutated argument {i}: {problem}"
        elif b is not None and not np.array_equal(a, b, equal_nan=b.dtype.kind == "f"):
            return f"argument {i} was modified"
    return None


def describe(case: Case) -> str:
    def one(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            layout = "" if x.is_contiguous() or x.numel() <= 1 else " strided"
            return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}{layout}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(one(v) for v in x) + "]"
        return repr(x)

    return "(" + ", ".join(one(a) for a in case.args) + ")"


@dataclass
class Result:
    """The outcome of one (operator, dtype) pair."""

    name: str
    dtype: str
    cases: int = 0
    failures: list[str] = field(default_factory=list)


def check(name: str, dtype: str | None, info: KernelInfo | None = None) -> Result:
    """Run every case of one (operator, dtype); dtype None for dtype-less (prim) ops."""
    info = info or load_all()[name]
    sp = SPECS[name]
    res = Result(name, dtype or "-")
    for k, case in enumerate(sp.cases(Gen(name, DTYPES[dtype] if dtype else None))):
        res.cases += 1
        layout = LAYOUTS[k % len(LAYOUTS)]
        problem = run_case(name, info, sp, case, layout)
        if problem:
            res.failures.append(f"case {k} {describe(case)} out={layout}: {problem}")
    if res.cases == 0:
        res.failures.append("no cases were generated")
    return res


def check_all(names: Iterable[str] | None = None) -> list[Result]:
    registry = load_all()
    results = []
    for name in sorted(names if names is not None else registry):
        info = registry[name]
        if name not in SPECS:
            results.append(Result(name, "-", failures=["no conformance spec"]))
            continue
        for dtype in info.dtypes or (None,):
            results.append(check(name, dtype, info))
    return results


# ---------------------------------------------------------------------------- elementwise

spec(
    [
        "aten::sqrt.out",
        "aten::rsqrt.out",
        "aten::exp.out",
        "aten::exp2.out",
        "aten::expm1.out",
        "aten::log.out",
        "aten::log1p.out",
        "aten::log2.out",
        "aten::log10.out",
        "aten::sin.out",
        "aten::cos.out",
        "aten::tan.out",
        "aten::tanh.out",
        "aten::asin.out",
        "aten::acos.out",
        "aten::atan.out",
        "aten::sinh.out",
        "aten::cosh.out",
        "aten::asinh.out",
        "aten::acosh.out",
        "aten::atanh.out",
        "aten::erf.out",
        "aten::reciprocal.out",
        "aten::neg.out",
        "aten::abs.out",
        "aten::sign.out",
        "aten::square.out",
        "aten::floor.out",
        "aten::ceil.out",
        "aten::round.out",
        "aten::trunc.out",
    ],
    unary,
)
spec("aten::round.decimals_out", lambda g: chain(unary(g, 2), unary(g, -1, special=False)))
spec(
    ["aten::mul.out", "aten::maximum.out", "aten::minimum.out", "aten::atan2.out", "aten::div.out"],
    binary,
)
spec(
    ["aten::remainder.Tensor_out", "aten::fmod.Tensor_out", "aten::floor_divide.out"],
    lambda g: binary(g, divisor=True),
)
spec(["aten::mul.Scalar_out", "aten::div.Scalar_out"], with_scalar)
spec(["aten::remainder.Scalar_out", "aten::fmod.Scalar_out"], lambda g: with_scalar(g, divisor=True))


def add_cases(g: Gen, scalar: bool, bools: bool = True) -> Iterator[Case]:
    yield from (with_scalar(g, 1, bools=bools) if scalar else binary(g, 1))
    alpha = 0.5 if g.is_float else 2
    if not g.is_bool:
        yield from (with_scalar(g, alpha, bools=bools) if scalar else binary(g, alpha, mixed=False))


spec(["aten::add.out", "aten::sub.out", "aten::rsub.Tensor_out"], lambda g: add_cases(g, False))
spec("aten::add.Scalar_out", lambda g: add_cases(g, True))
spec(["aten::sub.Scalar_out", "aten::rsub.Scalar_out"], lambda g: add_cases(g, True, bools=False))
spec(
    "aten::div.out_mode",
    lambda g: chain.from_iterable(binary(g, m, divisor=True) for m in (None, "trunc", "floor")),
)
spec(
    "aten::div.Scalar_mode_out",
    lambda g: chain.from_iterable(with_scalar(g, m, divisor=True) for m in (None, "trunc", "floor")),
)


def pow_cases(g: Gen) -> Iterator[Case]:
    low = None if g.is_float else 0
    for shape, layout in UNARY_SHAPES:
        yield Case((g.t(shape, layout=layout), g.t(shape[-1:], low=low, high=4)))
    yield Case((g.t((3, 4)), g.t((), torch.float32, low=0, high=3)))


spec("aten::pow.Tensor_Tensor_out", pow_cases)
spec(
    "aten::pow.Tensor_Scalar_out",
    lambda g: chain.from_iterable(unary(g, e, special=False) for e in (2, 3, 0.5, 0)),
)
spec(
    "aten::pow.Scalar_out",
    lambda g: (Case((s, g.t(shape, layout=lay, low=0, high=4))) for s in (2, 1.5) for shape, lay in UNARY_SHAPES),
)


def clamp_cases(g: Gen) -> Iterator[Case]:
    bounds = [(-1.0, 1.0), (None, 2.0), (0.5, None)] if g.is_float else [(-2, 3), (None, 1), (2, -1), (0.5, None)]
    for lo, hi in bounds:
        yield from unary(g, lo, hi)


def clamp_tensor_cases(g: Gen) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES:
        yield Case((g.t(shape, layout=layout), g.t(shape[-1:]), g.t(())))
    yield Case((g.t((3, 4)), None, g.t((3, 1))))
    yield Case((g.t((3, 4)), g.t((4,)), None))


spec("aten::clamp.out", clamp_cases)
spec("aten::clamp.Tensor_out", clamp_tensor_cases)
spec(
    "aten::addcmul.out",
    lambda g: (Case((a, b, g.t(b.shape), v)) for a, b in pairs(g, mixed=False) for v in (1, 0.5)),
)
spec(
    "aten::lerp.Scalar_out",
    lambda g: (Case((a, b, w)) for a, b in pairs(g, mixed=False) for w in (0.3, 0.75)),
)

# ---------------------------------------------------------------------------- activation

spec(
    [
        "aten::relu.out",
        "aten::sigmoid.out",
        "aten::silu.out",
        "aten::hardswish.out",
        "aten::hardsigmoid.out",
        "aten::mish.out",
    ],
    unary,
)
# torch's vectorized float32 gelu gives nan at ±inf (x·Φ(x) is ±inf/0): no specials for 'none'.
spec("aten::gelu.out", lambda g: chain(unary(g, "none", special=False), unary(g, "tanh")))
spec(
    "aten::hardtanh.out",
    lambda g: chain(unary(g, 0, 6), () if g.dtype == torch.uint8 else unary(g, -1, 1)),
)
spec("aten::leaky_relu.out", lambda g: chain(unary(g, 0.01), unary(g, 0.2, special=False)))
spec("aten::elu.out", lambda g: chain(unary(g, 1, 1, 1), unary(g, 0.5, 2, 1.5)))
spec("aten::celu.out", lambda g: chain(unary(g, 1.0), unary(g, 0.5, special=False)))
spec("aten::softplus.out", lambda g: chain(unary(g, 1, 20), unary(g, 2, 1)))
spec("aten::threshold.out", lambda g: chain(unary(g, 1, 9), unary(g, 0.5, -1.0) if g.is_float else ()))


def logit_cases(g: Gen) -> Iterator[Case]:
    for eps in (None, 0.1):
        for shape, layout in UNARY_SHAPES:
            yield Case((g.t(shape, layout=layout, low=0.01, high=0.99), eps))
        yield Case((g.special(), eps))


def glu_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((4, 6)), -1))
    yield Case((g.t((2, 4, 3), layout="t"), 1))
    yield Case((g.t((2, 4, 3, 2), layout="cl"), 0))
    yield Case((g.t((0, 2)), 1))


spec("aten::logit.out", logit_cases)
spec("aten::glu.out", glu_cases)


# ---------------------------------------------------------------------------- linalg


def mm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((4, 5))))
    yield Case((g.t((3, 4), layout="t"), g.t((4, 5), layout="t")))
    yield Case((g.t((0, 4)), g.t((4, 3))))
    yield Case((g.t((3, 0)), g.t((0, 2))))
    yield Case((g.t((1, 1)), g.t((1, 1))))


def bmm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), g.t((2, 4, 5))))
    yield Case((g.t((2, 3, 4), layout="t"), g.t((2, 4, 5), layout="s")))
    yield Case((g.t((0, 3, 4)), g.t((0, 4, 5))))


def addmm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((5,)), g.t((3, 4)), g.t((4, 5)), 1, 1))
    yield Case((g.t((3, 5)), g.t((3, 4), layout="t"), g.t((4, 5)), 0.5, 2))
    yield Case((g.special()[:5], g.t((3, 4)), g.t((4, 5)), 0, 1))
    yield Case((g.t(()), g.t((0, 4)), g.t((4, 5)), 1, 1))


def baddbmm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 5)), g.t((2, 3, 4)), g.t((2, 4, 5)), 1, 1))
    yield Case((g.t((5,)), g.t((2, 3, 4), layout="t"), g.t((2, 4, 5)), 0.5, -1))
    yield Case((g.t((2, 3, 5)), g.t((2, 3, 4)), g.t((2, 4, 5)), 0, 2))


def linear_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), g.t((5, 4)), g.t((5,))))
    yield Case((g.t((3, 4), layout="t"), g.t((5, 4)), None))
    yield Case((g.t((4,)), g.t((5, 4), layout="t"), g.t((5,))))
    yield Case((g.t((0, 4)), g.t((5, 4)), g.t((5,))))


spec("aten::mm.out", mm_cases, tol=4)
spec("aten::bmm.out", bmm_cases, tol=4)
spec("aten::addmm.out", addmm_cases, tol=4)
spec("aten::baddbmm.out", baddbmm_cases, tol=4)
spec("aten::linear.out", linear_cases, tol=4)
spec(
    "aten::mv.out",
    lambda g: [Case((g.t((3, 4)), g.t((4,)))), Case((g.t((3, 4), layout="t"), g.t((4,), layout="s")))],
    tol=4,
)
spec("aten::dot.out", lambda g: [Case((g.t((5,)), g.t((5,)))), Case((g.t((0,)), g.t((0,))))], tol=4)

# ---------------------------------------------------------------------------- convolution


def conv(
    g: Gen,
    x: tuple[int, ...],
    w: tuple[int, ...],
    bias: bool,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int = 1,
    transposed: bool = False,
    output_padding: list[int] | None = None,
    layout: str = "c",
) -> Case:
    out_ch = w[1] * groups if transposed else w[0]
    b = g.t((out_ch,)) if bias else None
    op = output_padding or [0] * len(stride)
    return Case((g.t(x, layout=layout), g.t(w), b, stride, padding, dilation, transposed, op, groups))


def conv_cases(g: Gen) -> Iterator[Case]:
    yield conv(g, (2, 4, 7, 6), (6, 4, 3, 3), True, [1, 1], [1, 1], [1, 1])
    yield conv(g, (2, 4, 7, 6), (6, 4, 3, 3), False, [2, 2], [0, 0], [1, 1], layout="cl")
    yield conv(g, (1, 4, 9, 8), (6, 4, 3, 2), True, [1, 2], [2, 1], [2, 1])
    yield conv(g, (2, 4, 5, 5), (6, 2, 3, 3), True, [1, 1], [1, 1], [1, 1], groups=2)
    yield conv(g, (1, 4, 5, 5), (4, 1, 3, 3), True, [1, 1], [1, 1], [1, 1], groups=4, layout="cl")
    yield conv(g, (2, 3, 9), (4, 3, 3), True, [2], [1], [1])
    yield conv(g, (2, 3, 9), (3, 1, 5), False, [1], [2], [1], groups=3, layout="t")
    yield conv(g, (1, 2, 4, 4, 4), (3, 2, 2, 2, 2), True, [1, 1, 1], [0, 0, 0], [1, 1, 1])
    yield conv(g, (1, 4, 5, 5), (4, 3, 3, 3), True, [2, 2], [1, 1], [1, 1], transposed=True, output_padding=[1, 1])
    yield conv(g, (2, 4, 6), (4, 3, 3), False, [2], [0], [1], groups=2, transposed=True)
    yield conv(g, (1, 2, 4, 3), (2, 3, 2, 3), True, [1, 2], [0, 1], [2, 1], transposed=True)


spec("aten::convolution.out", conv_cases, tol=10)

# ---------------------------------------------------------------------------- pooling


def avg_pool2d_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 7, 6))
    yield Case((x, [3, 3], [2, 2], [1, 1], False, True, None))
    yield Case((x, [3, 3], [2, 2], [1, 1], True, True, None))
    yield Case((x, [3, 2], [2, 1], [1, 0], True, False, None))
    yield Case((g.t((2, 3, 7, 6), layout="cl"), [2, 2], [], [0, 0], False, True, 3))
    yield Case((g.t((3, 5, 5)), [2], [], [0], False, True, None))


def avg_pool1d_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 9))
    yield Case((x, [3], [2], [1], False, True))
    yield Case((x, [3], [2], [1], True, False))
    yield Case((g.t((3, 8), layout="t"), [2], [], [0], False, True))


def max_pool_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 7, 6))
    yield Case((x, [3, 3], [2, 2], [1, 1], [1, 1], False))
    yield Case((x, [3, 3], [2, 2], [1, 1], [1, 1], True))
    yield Case((g.t((2, 3, 9, 8), layout="cl"), [2, 3], [1, 2], [1, 1], [2, 2], False))
    yield Case((g.t((3, 5, 5)), [2, 2], [], [0, 0], [1, 1], True))


def adaptive_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 7, 6))
    for size in ([1, 1], [3, 2], [7, 6], [4, 5]):
        yield Case((x, size))
    yield Case((g.t((3, 5, 5), layout="t"), [2, 3]))


spec("aten::avg_pool2d.out", avg_pool2d_cases, tol=4)
spec("aten::avg_pool1d.out", avg_pool1d_cases, tol=4)
spec("aten::max_pool2d_with_indices.out", max_pool_cases)
spec(["aten::adaptive_avg_pool2d.out", "aten::_adaptive_avg_pool2d.out"], adaptive_cases, tol=4)

# ---------------------------------------------------------------------------- normalization


def layer_norm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 8)), [8], g.t((8,)), g.t((8,)), 1e-5))
    yield Case((g.t((2, 3, 8), layout="t"), [3, 8], g.t((3, 8)), None, 1e-3))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [5], None, None, 1e-5))
    yield Case((g.t((0, 4)), [4], g.t((4,)), g.t((4,)), 1e-5))


def batch_norm_cases(g: Gen) -> Iterator[Case]:
    def stats(c: int) -> tuple[torch.Tensor, torch.Tensor]:
        return g.t((c,)), g.t((c,), low=0.1, high=2.0)

    yield Case((g.t((2, 3, 4, 5)), g.t((3,)), g.t((3,)), *stats(3), 0.1, 1e-5))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), None, g.t((3,)), *stats(3), 0.1, 1e-3))
    yield Case((g.t((4, 3)), g.t((3,)), None, *stats(3), 0.1, 1e-5))
    yield Case((g.t((2, 3, 6), layout="t"), g.t((3,)), g.t((3,)), *stats(3), 0.1, 1e-5))


def group_norm_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 6, 4, 5)), g.t((6,)), g.t((6,)), 2, 6, 20, 3, 1e-5))
    yield Case((g.t((2, 6, 4, 5), layout="cl"), None, None, 2, 6, 20, 1, 1e-5))
    yield Case((g.t((2, 4, 3)), g.t((4,)), None, 2, 4, 3, 4, 1e-3))


spec("aten::native_layer_norm.out", layer_norm_cases, tol=10)
spec("aten::_native_batch_norm_legit_no_training.out", batch_norm_cases, tol=10)
spec("aten::native_group_norm.out", group_norm_cases, tol=10)

# ---------------------------------------------------------------------------- softmax


def softmax_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 5)), 1, False))
    yield Case((g.t((3, 5), layout="t"), 0, False))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), 1, False))
    yield Case((g.t(()), 0, False))
    yield Case((g.t((0, 3)), -1, False))
    yield Case((torch.stack([g.special(), g.special().flip(0)]), 1, False))
    yield Case((torch.full((2, 3), -math.inf, dtype=g.dtype), 1, False))


spec(["aten::_softmax.out", "aten::_log_softmax.out"], softmax_cases, tol=4)

# ---------------------------------------------------------------------------- reduction

REDUCE_INPUTS = [((3, 4), "c"), ((2, 3, 4), "t"), ((2, 3, 4, 5), "cl"), ((0, 3), "c")]


def reduce_cases(g: Gen, dims: Sequence[Any], *extra: Any, empty: bool = True) -> Iterator[Case]:
    for (shape, layout), dim in zip(REDUCE_INPUTS if empty else REDUCE_INPUTS[:3], dims):
        for keepdim in (False, True):
            yield Case((g.t(shape, layout=layout), dim, keepdim, *extra))


def sum_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [[1], [0, 2], [-1, 1], [1]], None)
    yield Case((g.t((3, 4)), None, False, None))
    yield Case((g.t((3, 4)), [], True, None))
    yield Case((g.t(()), [0], False, None))
    yield Case((g.t((3, 4)), [0], False, torch.float64 if g.is_float else torch.int32))


def mean_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [[1], [0, 2], [-1, 1], [1]], None)
    yield Case((g.t((3, 4)), None, False, None))
    yield Case((g.t((3, 4)), [1], False, torch.float64))


def amax_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [[1], [0, 2], [-1, 1]], empty=False)
    yield Case((g.t((3, 4)), [], False))
    yield Case((g.t(()), [0], True))
    yield Case((g.t((0, 3)), [1], False))


def arg_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [1, 0, -1], empty=False)
    yield Case((g.t((3, 4)), None, False))
    yield Case((g.t((3, 4)), None, True))
    yield Case((g.t(()), None, False))
    yield Case((g.t(()), 0, True))


def dim_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [1, 0, -1], empty=False)
    yield Case((g.t(()), 0, False))
    yield Case((g.t((0, 3)), 1, True))


def var_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), [1], None, False))
    yield Case((g.t((2, 3, 4), layout="t"), None, 0, True))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [0, 2], 2, False))
    yield Case((g.t((3, 2)), [1], 0.5, True))


def any_cases(g: Gen, dims: bool) -> Iterator[Case]:
    sparse = g.t((3, 4)) * (g.t((3, 4), torch.bool) & g.t((3, 4), torch.bool)).to(g.dtype)
    if dims:
        yield from reduce_cases(g, [[1], [0, 2], [-1, 1], [1]])
        yield Case((sparse, None, False))
        yield Case((sparse, [], False))
    else:
        yield from reduce_cases(g, [1, 0, -1, 1])
        yield Case((sparse, 1, False))


def scan_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), 1, None))
    yield Case((g.t((2, 3, 4), layout="t"), 0, None))
    yield Case((g.t(()), 0, None))
    yield Case((g.t((0, 3)), 1, None))
    yield Case((g.t((3, 4)), -1, torch.float64 if g.is_float else torch.int32))


def logsumexp_cases(g: Gen) -> Iterator[Case]:
    yield from reduce_cases(g, [[1], [0, 2], [-1, 1], [1]])
    if g.is_float:
        yield Case((torch.stack([g.special(), torch.full((14,), -math.inf, dtype=g.dtype)]), [1], False))


def norm_cases(g: Gen) -> Iterator[Case]:
    x = g.t((3, 4))
    for ord, dim, keepdim in [
        (2, None, False),
        (1, [1], True),
        (math.inf, [0], False),
        (0, None, False),
        (3, [1], False),
        (-math.inf, [1], True),
    ]:
        yield Case((x, ord, dim, keepdim, None))
    yield Case((g.t((2, 3, 4), layout="t"), 2, [0, 2], False, None))
    yield Case((g.t((0, 3)), 2, [0], False, None))


spec("aten::sum.IntList_out", sum_cases, tol=4)
spec(
    "aten::sum.out",
    lambda g: [Case((g.t((3, 4)), None)), Case((g.t((2, 3, 4), layout="t"), None)), Case((g.t((0,)), None))],
    tol=4,
)
spec("aten::mean.out", mean_cases, tol=4)
spec(
    "aten::prod.int_out",
    lambda g: chain(reduce_cases(g, [1, 0, -1, 1], None), [Case((g.t(()), 0, False, None))]),
    tol=4,
)
spec(
    "aten::prod.out",
    lambda g: [
        Case((g.t((3, 4)), None)),
        Case((g.t((0,)), None)),
        Case((g.t((2, 3)), torch.float64 if g.is_float else torch.int16)),
    ],
    tol=4,
)
spec(["aten::amax.out", "aten::amin.out"], amax_cases)
spec(
    ["aten::max.unary_out", "aten::min.unary_out"],
    lambda g: [Case((g.t(s, layout=lay),)) for s, lay in REDUCE_INPUTS[:3]] + [Case((g.t(()),))],
)
spec(["aten::argmax.out", "aten::argmin.out"], arg_cases)
spec(["aten::max.dim_max", "aten::min.dim_min"], dim_cases)
spec(["aten::var.correction_out", "aten::std.correction_out", "aten::var_mean.correction_out"], var_cases, tol=10)
spec(["aten::any.out", "aten::all.out"], lambda g: any_cases(g, False))
spec(["aten::any.dims_out", "aten::all.dims_out"], lambda g: any_cases(g, True))
spec(
    ["aten::any.all_out", "aten::all.all_out"],
    lambda g: [Case((g.t(s, layout=lay),)) for s, lay in REDUCE_INPUTS] + [Case((g.t(()),))],
)
spec(["aten::cumsum.out", "aten::cumprod.out"], scan_cases, tol=4)
spec("aten::logsumexp.out", logsumexp_cases, tol=4)
spec("aten::linalg_vector_norm.out", norm_cases, tol=4)

# ---------------------------------------------------------------------------- compare

COMPARE_TENSOR = [
    "aten::eq.Tensor_out",
    "aten::ne.Tensor_out",
    "aten::lt.Tensor_out",
    "aten::le.Tensor_out",
    "aten::gt.Tensor_out",
    "aten::ge.Tensor_out",
]
COMPARE_SCALAR = [
    "aten::eq.Scalar_out",
    "aten::ne.Scalar_out",
    "aten::lt.Scalar_out",
    "aten::le.Scalar_out",
    "aten::gt.Scalar_out",
    "aten::ge.Scalar_out",
]


def bitwise_cases(g: Gen) -> Iterator[Case]:
    yield from binary(g, mixed=False)
    yield Case((g.t((3, 4)), g.t((4,), torch.bool)))
    yield Case((g.t((3, 4)), g.t((), torch.int64)))


def bitwise_scalar_cases(g: Gen) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES[:6]:
        for s in [True, 3] if g.is_bool else [2, -3, True]:
            yield Case((g.t(shape, layout=layout), s))


spec([*COMPARE_TENSOR, "aten::logical_and.out", "aten::logical_or.out", "aten::logical_xor.out"], binary)
spec(COMPARE_SCALAR, with_scalar)
spec(["aten::logical_not.out", "aten::isnan.out", "aten::isinf.out", "aten::bitwise_not.out"], unary)
spec(["aten::bitwise_and.Tensor_out", "aten::bitwise_or.Tensor_out", "aten::bitwise_xor.Tensor_out"], bitwise_cases)
spec(
    ["aten::bitwise_and.Scalar_out", "aten::bitwise_or.Scalar_out", "aten::bitwise_xor.Scalar_out"],
    bitwise_scalar_cases,
)

# ---------------------------------------------------------------------------- shape


def view_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), [6, 4]))
    yield Case((g.t((2, 3, 4), layout="t"), [-1]))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [4, -1, 5]))
    yield Case((g.t(()), [1, 1]))
    yield Case((g.t((1,)), []))
    yield Case((g.t((0, 3)), [3, 0]))


def permute_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), [2, 0, 1]))
    yield Case((g.t((2, 3, 4), layout="t"), [-1, 0, 1]))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [0, 2, 3, 1]))
    yield Case((g.t(()), []))


def transpose_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4)), 0, 2))
    yield Case((g.t((2, 3, 4), layout="t"), -1, 1))
    yield Case((g.t((3, 4)), 1, 1))
    yield Case((g.t(()), 0, -1))


def expand_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 1)), [2, 3, 4], False))
    yield Case((g.t((3, 1)), [-1, 5], False))
    yield Case((g.t(()), [2, 2], False))
    yield Case((g.t((1,)), [0], False))
    yield Case((g.t((3, 1), layout="t"), [2, -1, 3], False))


def slice_cases(g: Gen) -> Iterator[Case]:
    x = g.t((5, 6))
    yield Case((x, 1, 1, 4, 1))
    yield Case((x, 0, None, None, 2))
    yield Case((x, 1, -3, None, 1))
    yield Case((x, 0, 2, 100, 1))
    yield Case((x, 1, 4, 2, 1))
    yield Case((g.t((2, 3, 4), layout="t"), -1, 1, 4, 2))


def select_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), 0, 1))
    yield Case((g.t((3, 4)), 1, -1))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), 1, 2))
    yield Case((g.t((5,)), 0, 4))


def squeeze_cases(g: Gen) -> Iterator[Case]:
    x = g.t((1, 3, 1, 4))
    yield Case((x, [0, 2]))
    yield Case((x, [0, 1]))
    yield Case((x, [-2]))
    yield Case((x, []))
    yield Case((g.t(()), [0]))
    yield Case((g.t((1, 3, 1), layout="t"), [0, -1]))


def split_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((5, 4)), [2, 3], 0))
    yield Case((g.t((3, 6), layout="t"), [1, 2, 3], 1))
    yield Case((g.t((5, 4)), [5, 0], 0))
    yield Case((g.t((2, 4, 3, 3), layout="cl"), [1, 3], 1))


def split_size_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((5, 4)), 2, 0))
    yield Case((g.t((3, 6), layout="t"), 3, 1))
    yield Case((g.t((4, 3)), 4, 0))
    yield Case((g.t((4, 3)), 5, -2))


def cat_cases(g: Gen) -> Iterator[Case]:
    yield Case(([g.t((2, 3)), g.t((4, 3))], 0))
    yield Case(([g.t((2, 3)), g.t((2, 5), layout="t"), g.t((2, 0))], 1))
    yield Case(([g.t((2, 3)), g.t((2, 3), torch.int32)], -1))
    yield Case(([g.t((2, 3)), g.t((0,))], 0))
    yield Case(([g.t((2, 3, 2, 2), layout="cl"), g.t((2, 1, 2, 2))], 1))
    yield Case(([g.t((3,))], 0))


def stack_cases(g: Gen) -> Iterator[Case]:
    yield Case(([g.t((2, 3)), g.t((2, 3)), g.t((2, 3))], 0))
    yield Case(([g.t((2, 3)), g.t((2, 3), layout="t")], 2))
    yield Case(([g.t((2, 3)), g.t((2, 3), torch.int64)], -1))
    yield Case(([g.t(()), g.t(())], 0))
    yield Case(([g.t((0, 2))], 1))


def repeat_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3)), [2, 2]))
    yield Case((g.t((2, 3), layout="t"), [2, 1, 3]))
    yield Case((g.t((2, 3)), [0, 1]))
    yield Case((g.t(()), [3]))


def tri_cases(g: Gen) -> Iterator[Case]:
    for diagonal in (0, 1, -1):
        yield Case((g.t((4, 5)), diagonal))
    yield Case((g.t((2, 3, 4), layout="t"), 0))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), 2))


def diagonal_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((4, 5)), 0, 0, 1))
    yield Case((g.t((4, 5)), 1, 0, 1))
    yield Case((g.t((4, 5), layout="t"), -1, 1, 0))
    yield Case((g.t((2, 3, 4)), 0, 1, 2))
    yield Case((g.t((2, 3, 4)), 1, 0, -1))


def unfold_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 7)), 1, 3, 2))
    yield Case((g.t((8,)), 0, 2, 2))
    yield Case((g.t((5, 3), layout="t"), 0, 5, 1))
    yield Case((g.t(()), 0, 1, 1))


spec("aten::view_copy.out", view_cases)
# _unsafe_view is a view: torch refuses inputs whose strides cannot be viewed that way.
spec("aten::_unsafe_view.out", lambda g: (c for c in view_cases(g) if c.args[0].is_contiguous()))
spec("aten::permute_copy.out", permute_cases)
spec(
    "aten::t_copy.out",
    lambda g: [Case((g.t(s, layout=lay),)) for s, lay in [((3, 4), "c"), ((3, 4), "t"), ((5,), "c"), ((), "c")]],
)
spec("aten::transpose_copy.int_out", transpose_cases)
spec("aten::expand_copy.out", expand_cases)
spec("aten::alias_copy.out", unary)
spec("aten::clone.out", lambda g: chain(unary(g, None), [Case((g.t((2, 3, 4, 5)), torch.channels_last))]))
spec("aten::slice_copy.Tensor_out", slice_cases)
spec(
    "aten::narrow_copy.out",
    lambda g: [Case((g.t((5, 6)), 1, 1, 3)), Case((g.t((5, 6), layout="t"), 0, -2, 2)), Case((g.t((5, 6)), 0, 5, 0))],
)
spec("aten::select_copy.int_out", select_cases)
spec("aten::squeeze_copy.dims_out", squeeze_cases)
spec("aten::squeeze_copy.dim_out", lambda g: [Case((g.t((1, 3, 1)), d)) for d in (0, 1, -1)] + [Case((g.t(()), 0))])
spec("aten::squeeze_copy.out", lambda g: [Case((g.t(s),)) for s in [(1, 3, 1, 4), (), (1, 1), (0, 1)]])
spec(
    "aten::unsqueeze_copy.out",
    lambda g: [Case((g.t((3, 4), layout="t"), d)) for d in (0, -1, 2, 1)] + [Case((g.t(()), 0))],
)
spec("aten::split_with_sizes_copy.out", split_cases)
spec("aten::split_copy.Tensor_out", split_size_cases)
spec(
    "aten::unbind_copy.int_out",
    lambda g: [Case((g.t((3, 4)), 0)), Case((g.t((2, 3, 4), layout="t"), 2)), Case((g.t((2, 0)), 0))],
)
spec("aten::cat.out", cat_cases)
spec("aten::stack.out", stack_cases)
spec("aten::repeat.out", repeat_cases)
spec(
    "aten::flip.out",
    lambda g: [Case((g.t((2, 3, 4), layout="t"), d)) for d in ([0, 2], [-1], [])] + [Case((g.t(()), []))],
)
spec(
    "aten::roll.out",
    lambda g: [
        Case((g.t((3, 4)), [1], [0])),
        Case((g.t((3, 4), layout="t"), [2, -1], [0, 1])),
        Case((g.t((3, 4)), [3], [])),
    ],
)
spec(["aten::tril.out", "aten::triu.out"], tri_cases)
spec("aten::diagonal_copy.out", diagonal_cases)
spec("aten::unfold_copy.out", unfold_cases)
spec(
    "aten::pixel_shuffle.out",
    lambda g: [
        Case((g.t((1, 8, 3, 3)), 2)),
        Case((g.t((2, 9, 2, 2), layout="cl"), 3)),
        Case((g.t((2, 2, 4, 2, 2)), 2)),
    ],
)
spec("aten::pixel_unshuffle.out", lambda g: [Case((g.t((1, 2, 4, 6)), 2)), Case((g.t((2, 1, 6, 3), layout="t"), 3))])

# ---------------------------------------------------------------------------- index


def distinct(g: Gen, n: int, k: int, count: int, dim: int) -> torch.Tensor:
    """`count` index tensors of k distinct positions in [0, n) along dim of a 2-d shape."""
    shape = (n, count) if dim == 0 else (count, n)
    return torch.argsort(torch.rand(shape, generator=g.g), dim=dim).narrow(dim, 0, k)


def gather_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), 1, g.index((3, 2), 4), False))
    yield Case((g.t((3, 4)), 0, g.index((2, 4), 3), False))
    yield Case((g.t((3, 4), layout="t"), 1, g.index((2, 2), 4), False))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), -1, g.index((2, 3, 4, 2), 5), False))
    yield Case((g.t(()), 0, g.index((), 1), False))


def index_cases(g: Gen) -> Iterator[Case]:
    x = g.t((3, 4, 5))
    yield Case((x, [g.index((2,), 3)]))
    yield Case((x, [None, g.index((3,), 4) - 2]))
    yield Case((x, [g.index((2,), 3), None, g.index((2,), 5, torch.int32)]))
    yield Case((x, [g.t((3, 4), torch.bool)]))
    yield Case((g.t((3, 4), layout="t"), [g.index((2, 2), 3), g.index((2,), 4)]))
    yield Case((x, [None, None, g.index((0,), 5)]))


def index_select_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), 0, g.index((5,), 3)))
    yield Case((g.t((3, 4), layout="t"), 1, g.index((2,), 4, torch.int32)))
    yield Case((g.t(()), 0, g.index((1,), 1)))
    yield Case((g.t((3, 4)), 1, g.index((0,), 4)))


def embedding_cases(g: Gen) -> Iterator[Case]:
    w = g.t((10, 4))
    yield Case((w, g.index((2, 3), 10), -1, False, False))
    yield Case((w, g.index((), 10), 0, False, False))
    yield Case((g.t((10, 4), layout="t"), g.index((5,), 10, torch.int32), -1, False, False))


def where_cases(g: Gen) -> Iterator[Case]:
    for a, b in pairs(g):
        yield Case((g.t(torch.broadcast_shapes(a.shape, b.shape)[-1:], torch.bool), a, b))
    yield Case((g.t((3, 1), torch.bool), g.t(()), g.t((4,))))


def scatter_cases(g: Gen, value: bool) -> Iterator[Case]:
    extra: Any = (2 if not g.is_float else 2.5) if not g.is_bool else True
    for dim, idx in ((0, distinct(g, 3, 2, 5, 0)), (1, distinct(g, 5, 2, 3, 1))):
        yield Case((g.t((3, 5)), dim, idx, extra if value else g.t((3, 5))))
    yield Case((g.t((3, 5), layout="t"), 1, distinct(g, 5, 5, 2, 1), extra if value else g.t((3, 5))))
    yield Case((g.t(()), 0, g.index((), 1), extra if value else g.t(())))


def scatter_add_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 5)), 0, g.index((4, 5), 3), g.t((4, 5))))
    yield Case((g.t((3, 5), layout="t"), 1, g.index((2, 7), 5), g.t((3, 8))))


def index_put_cases(g: Gen) -> Iterator[Case]:
    x = g.t((5, 4))
    yield Case((x, [distinct(g, 5, 3, 1, 0)[:, 0]], g.t((3, 4)), False))
    yield Case((x, [distinct(g, 5, 2, 1, 0)[:, 0]], g.t((4,)), False))
    yield Case((x, [None, distinct(g, 4, 2, 1, 0)[:, 0]], g.t((5, 2)), False))
    yield Case((g.t((5, 4), layout="t"), [g.t((5,), torch.bool)], g.t((4,)), False))
    if not g.is_bool:
        yield Case((x, [g.index((6,), 5)], g.t((6, 4)), True))


def masked_fill_cases(g: Gen) -> Iterator[Case]:
    value = True if g.is_bool else (-1.5 if g.is_float else 7)
    yield Case((g.t((3, 4)), g.t((3, 4), torch.bool), value))
    yield Case((g.t((3, 4), layout="t"), g.t((4,), torch.bool), value))
    yield Case((g.t(()), g.t((), torch.bool), value))
    if g.is_float:
        yield Case((g.t((3, 4)), g.t((3, 4), torch.bool), math.inf))


def nonzero_cases(g: Gen) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES:
        x = g.t(shape, layout=layout)
        yield Case((x * g.t(shape, torch.bool).to(x.dtype),))


def scalar_value(g: Gen) -> bool | int | float:
    return True if g.is_bool else (2.5 if g.is_float else 3)


def arange_cases(g: Gen) -> Iterator[Case]:
    out = (g.dtype,)
    yield Case((0, 10, 1), out)
    yield Case((1, 7, 2), out)
    if g.dtype != torch.uint8:
        yield Case((-3, 3, 1), out)
        yield Case((10, 0, -3), out)
    if g.is_float:
        yield Case((0.5, 3.2, 0.3), out)


spec("aten::gather.out", gather_cases)
spec("aten::index.Tensor_out", index_cases)
spec("aten::index_select.out", index_select_cases)
spec("aten::embedding.out", embedding_cases)
spec("aten::where.self_out", where_cases)
spec("aten::scatter.src_out", lambda g: scatter_cases(g, False))
spec("aten::scatter.value_out", lambda g: scatter_cases(g, True))
spec("aten::scatter_add.out", scatter_add_cases, tol=4)
spec("aten::index_put.out", index_put_cases, tol=4)
spec("aten::masked_fill.Scalar_out", masked_fill_cases)
spec(
    "aten::select_scatter.out",
    lambda g: [Case((g.t((3, 4)), g.t((4,)), 0, 1)), Case((g.t((3, 4), layout="t"), g.t((3,)), 1, -1))],
)
spec(
    "aten::slice_scatter.out",
    lambda g: [
        Case((g.t((5, 4)), g.t((2, 4)), 0, 1, 3, 1)),
        Case((g.t((5, 4), layout="t"), g.t((5, 2)), 1, 0, 4, 2)),
        Case((g.t((5, 4)), g.t((5, 4)), 0, None, None, 1)),
    ],
)
spec("aten::nonzero.out", nonzero_cases)
spec("aten::arange.start_out", arange_cases)
spec("aten::arange.out", lambda g: [Case((e,), (g.dtype,)) for e in ([5, 0, 3.5] if g.is_float else [5, 0])])
spec("aten::full.out", lambda g: [Case((s, scalar_value(g)), (g.dtype,)) for s in ([2, 3], [], [0, 2])])
spec(["aten::zeros.out", "aten::ones.out"], lambda g: [Case((s,), (g.dtype,)) for s in ([2, 3], [], [0, 2])])
spec(
    "aten::full_like.out",
    lambda g: [Case((g.t(s, layout=lay), scalar_value(g), None), (g.dtype,)) for s, lay in UNARY_SHAPES[:6]],
)
spec(
    ["aten::zeros_like.out", "aten::ones_like.out"],
    lambda g: [Case((g.t(s, layout=lay), None), (g.dtype,)) for s, lay in UNARY_SHAPES[:6]],
)
spec("aten::scalar_tensor.out", lambda g: [Case((v,), (g.dtype,)) for v in (scalar_value(g), 0, True)])

# ---------------------------------------------------------------------------- copy


def cast_targets(g: Gen) -> list[torch.dtype]:
    """Target dtypes every value of the generated inputs converts to without UB."""
    targets = [torch.float32, torch.float64, torch.float16, torch.int8, torch.int32, torch.int64, torch.bool]
    return targets + [torch.uint8] if g.dtype in (torch.uint8, torch.bool) else targets


def to_copy_cases(g: Gen, memory_format: bool) -> Iterator[Case]:
    x = g.t((3, 4), layout="t")
    for target in cast_targets(g):
        yield Case((x, False, None), (target,))
    yield Case((g.t(()), False, None), (g.dtype,))
    fmt: Any = torch.channels_last if memory_format else [0, 2, 3, 1]
    yield Case((g.t((2, 3, 4, 5)), False, fmt), (torch.float32,))


def copy_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((3, 4), layout="t"), False))
    yield Case((g.t((3, 4)), g.t((4,)), False))
    yield Case((g.t((3, 4)), g.t((3, 4), torch.float32 if not g.is_float else torch.float64), False))
    yield Case((g.t(()), g.t(()), False))


spec(
    "dim_order_ops::_to_dim_order_copy.out",
    lambda g: to_copy_cases(g, False),
    ref=lambda c: c.args[0].to(c.out_dtypes[0]),
    outs="tensor",
)
spec(
    "dim_order_ops::_clone_dim_order.out",
    lambda g: (
        [Case((g.t(s, layout=lay), False, None)) for s, lay in UNARY_SHAPES]
        + [Case((g.t((2, 3, 4, 5)), False, [0, 2, 3, 1]))]
    ),
    ref=lambda c: c.args[0].clone(),
    outs="tensor",
)
spec("aten::_to_copy.out", lambda g: to_copy_cases(g, True))
spec("aten::copy_", copy_cases, mutates=(0,))

# ---------------------------------------------------------------------------- prim ops

PRIM_REFS: dict[str, Callable[..., Any]] = {
    "executorch_prim::add.Scalar": lambda a, b: a + b,
    "executorch_prim::sub.Scalar": lambda a, b: a - b,
    "executorch_prim::mul.Scalar": lambda a, b: a * b,
    "executorch_prim::floordiv.Scalar": lambda a, b: (
        float(math.floor(a / b)) if isinstance(a, float) or isinstance(b, float) else math.floor(a / b)
    ),
    "executorch_prim::truediv.Scalar": lambda a, b: a / b,
    "executorch_prim::mod.Scalar": lambda a, b: a - b * math.floor(a / b),
    "executorch_prim::eq.Scalar": lambda a, b: a == b,
    "executorch_prim::gt.Scalar": lambda a, b: a > b,
    "executorch_prim::lt.Scalar": lambda a, b: a < b,
    "executorch_prim::ge.Scalar": lambda a, b: a >= b,
    "executorch_prim::le.Scalar": lambda a, b: a <= b,
    "executorch_prim::sym_max.Scalar": torch.sym_max,
    "executorch_prim::sym_min.Scalar": torch.sym_min,
    "executorch_prim::neg.Scalar": lambda a: -a,
    "executorch_prim::sym_float.Scalar": torch.sym_float,
    "executorch_prim::sym_int.Scalar": torch.sym_int,
    "executorch_prim::sym_not.Scalar": torch.sym_not,
    "executorch_prim::ceil.Scalar": math.ceil,
    "executorch_prim::trunc.Scalar": math.trunc,
    "executorch_prim::round.Scalar": round,
    "executorch_prim::sym_ite.Scalar": torch.sym_ite,
}
PRIM_ARGS: dict[int, list[tuple[Any, ...]]] = {
    1: [(7,), (-3,), (2.5,), (-2.5,), (True,), (0,)],
    2: [(7, 3), (-7, 3), (7, -3), (4, 4), (2.5, 0.5), (3, 1.5), (-1.5, 2)],
    3: [(True, 3, 4), (False, 3, 4), (True, 1.5, 2.5)],
}
INT_ONLY = {"executorch_prim::mod.Scalar", "executorch_prim::sym_not.Scalar"}


def prim_cases(name: str, arity: int) -> CaseFn:
    def cases(g: Gen) -> Iterator[Case]:
        for args in PRIM_ARGS[arity]:
            if name not in INT_ONLY or all(isinstance(a, int) for a in args):
                yield Case(args)

    return cases


for _name, _ref in PRIM_REFS.items():
    _arity = (
        3
        if _name.endswith("sym_ite.Scalar")
        else (
            1
            if _ref in (math.ceil, math.trunc, round, torch.sym_float, torch.sym_int, torch.sym_not)
            or _name.endswith("neg.Scalar")
            else 2
        )
    )
    spec(_name, prim_cases(_name, _arity), ref=lambda c, f=_ref: f(*c.args), outs="none")


def sym_size_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((2, 3, 4), layout="t"), 0))
    yield Case((g.t((2, 3, 4)), -1))
    yield Case((g.t((0, 5)), 0))


def stack_by_copy_index(fn: Callable[..., Any], args: list[Any]) -> np.ndarray:
    """Grow a bounded accumulator row by row as a scan loop does."""
    rows = args[0]
    storage = np.zeros(max(len(rows) * rows[0].nbytes, 1), dtype=np.uint8)
    acc = bounded(storage, rows[0].dtype, (0, *rows[0].shape))
    for i, row in enumerate(rows):
        acc = fn(acc, row, i)
    return acc


spec("aten::sym_size.int", sym_size_cases)
spec("aten::sym_numel", lambda g: [Case((g.t(s, layout=lay),)) for s, lay in UNARY_SHAPES])
spec(
    "executorch_prim::et_copy_index.tensor",
    lambda g: [Case(([g.t((3, 4)) for _ in range(4)],)), Case(([g.t(())],)), Case(([g.t((2, 0)) for _ in range(3)],))],
    ref=lambda c: torch.stack(c.args[0]),
    run=stack_by_copy_index,
    outs="none",
)

# ---------------------------------------------------------------------------- more families


def shift_cases(g: Gen, scalar: bool) -> Iterator[Case]:
    for shape, layout in UNARY_SHAPES[:6]:
        x = g.t(shape, layout=layout)
        yield Case((x, 3) if scalar else (x, g.t(shape[-1:], low=0, high=8 * g.dtype.itemsize + 2)))


def copy_out_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((3, 4), layout="t"), False))
    yield Case((g.t((3, 4)), g.t((4,), torch.float32 if not g.is_float else torch.int32), False))
    yield Case((g.t(()), g.t(()), False))


def masked_select_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((3, 4), torch.bool)))
    yield Case((g.t((3, 4), layout="t"), g.t((4,), torch.bool)))
    yield Case((g.t((4,)), g.t((3, 1), torch.bool)))
    yield Case((g.t(()), g.t((), torch.bool)))


def masked_scatter_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((3, 4)), g.t((3, 4), torch.bool), g.t((12,))))
    yield Case((g.t((3, 4), layout="t"), g.t((4,), torch.bool), g.t((4, 5))))


def pad_cases(g: Gen) -> Iterator[Case]:
    value = 1.5 if g.is_float else (True if g.is_bool else 3)
    yield Case((g.t((2, 3, 4)), [1, 2], 0))
    yield Case((g.t((2, 3, 4), layout="t"), [1, 1, 2, 0], value))
    yield Case((g.t((2, 3, 4)), [-1, 1], value))
    yield Case((g.t((2, 3, 4)), [0, 0, 0, 0, 1, 1], 0))
    yield Case((g.t((2, 3, 4, 5), layout="cl"), [1, 1, 1, 1], value))


def border_pad_cases(nsp: int) -> CaseFn:
    def cases(g: Gen) -> Iterator[Case]:
        spatial = (4, 5, 3)[:nsp]
        yield Case((g.t((2, 3, *spatial)), [1, 2] * nsp))
        yield Case((g.t((3, *spatial), layout="t"), [2, 0] * nsp))
        yield Case((g.t((1, 2, *spatial)), [0, 0] * nsp))

    return cases


def upsample_cases(g: Gen, vec: bool, bilinear: bool) -> Iterator[Case]:
    x = g.t((2, 3, 4, 5))
    xc = g.t((1, 2, 3, 3), layout="cl")
    corners = (False, True) if bilinear else (None,)
    for ac in corners:
        mid = (ac,) if bilinear else ()
        if vec:
            yield Case((x, [8, 10], *mid, None))
            yield Case((x, [6, 3], *mid, None))
            yield Case((xc, None, *mid, [2.0, 1.5]))
            yield Case((x, None, *mid, [0.5, 2.0]))
        else:
            yield Case((x, [8, 10], *mid, None, None))
            yield Case((xc, [7, 5], *mid, None, None))
            yield Case((x, [6, 7], *mid, 1.5, 1.4))


def grid_sampler_cases(g: Gen) -> Iterator[Case]:
    x = g.t((2, 3, 5, 4))
    grid = g.t((2, 3, 6, 2), low=-1.2, high=1.2)
    for mode in (0, 1, 2):
        for padding in (0, 1, 2):
            for ac in (False, True):
                yield Case((x, grid, mode, padding, ac))
    yield Case((g.t((1, 2, 4, 4), layout="cl"), g.t((1, 2, 2, 2), low=-1, high=1), 0, 0, False))


def distinct_values(g: Gen, shape: tuple[int, ...]) -> torch.Tensor:
    """Values without ties (sorting order is then unique)."""
    n = math.prod(shape)
    if g.is_float:
        return g.t(shape)
    start = 0 if g.dtype == torch.uint8 else -(n // 2)
    return (torch.randperm(n, generator=g.g) + start).to(g.dtype).reshape(shape)


def sort_cases(g: Gen, stable: bool) -> Iterator[Case]:
    lead = (None,) if stable else ()
    for dim, descending in ((1, False), (0, True), (-1, True)):
        yield Case((distinct_values(g, (3, 5)), *lead, dim, descending))
    yield Case((distinct_values(g, (4, 3)).t(), *lead, 1, False))
    yield Case((g.t(()), *lead, 0, False))
    if g.is_float:
        yield Case((g.special(), *lead, 0, True))


def topk_cases(g: Gen) -> Iterator[Case]:
    yield Case((distinct_values(g, (3, 5)), 2, 1, True, True))
    yield Case((distinct_values(g, (3, 5)), 3, 0, False, True))
    yield Case((distinct_values(g, (4, 3)).t(), 1, -1, True, True))
    yield Case((distinct_values(g, (3, 5)), 0, 1, True, True))


def bn_train_cases(g: Gen) -> Iterator[Case]:
    def stats(c: int) -> tuple[torch.Tensor, torch.Tensor]:
        return g.t((c,)), g.t((c,), low=0.1, high=2.0)

    yield Case((g.t((4, 3, 2, 2)), g.t((3,)), g.t((3,)), *stats(3), True, 0.1, 1e-5))
    yield Case((g.t((4, 3, 5), layout="t"), None, None, *stats(3), True, 0.3, 1e-3))
    yield Case((g.t((4, 3)), g.t((3,)), g.t((3,)), *stats(3), False, 0.1, 1e-5))


def bn_no_stats_cases(g: Gen) -> Iterator[Case]:
    yield Case((g.t((4, 3, 2, 2)), g.t((3,)), g.t((3,)), True, 0.1, 1e-5))
    yield Case((g.t((4, 3, 5), layout="t"), None, None, True, 0.3, 1e-3))


def cdist_cases(g: Gen) -> Iterator[Case]:
    for p in (2.0, 1.0, 0.0, math.inf, 3.0):
        yield Case((g.t((2, 4, 3)), g.t((2, 5, 3)), p, None))
    yield Case((g.t((4, 3), layout="t"), g.t((0, 3)), 2.0, None))


def as_strided_cases(g: Gen) -> Iterator[Case]:
    x = g.t((4, 5))
    yield Case((x, [3, 3], [5, 1], None))
    yield Case((x, [2, 2], [1, 5], 3))
    yield Case((x, [4], [5], 1))
    yield Case((g.t((3, 4), layout="t"), [2, 3], [1, 3], None))
    yield Case((x, [0, 3], [1, 1], None))


spec(["aten::bitwise_left_shift.Tensor_out", "aten::bitwise_right_shift.Tensor_out"], lambda g: shift_cases(g, False))
spec(
    ["aten::bitwise_left_shift.Tensor_Scalar_out", "aten::bitwise_right_shift.Tensor_Scalar_out"],
    lambda g: shift_cases(g, True),
)
spec("aten::copy.out", copy_out_cases)
spec(["aten::detach_copy.out", "aten::lift_fresh_copy.out"], unary)
spec(["et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out"], unary, ref=lambda c: c.args[0].clone(), outs="tensor")
spec("aten::index_put_", index_put_cases, mutates=(0,))
spec("aten::masked_select.out", masked_select_cases)
spec("aten::masked_scatter.out", masked_scatter_cases)
spec(
    "aten::repeat_interleave.Tensor_out",
    lambda g: [Case((g.t((4,), low=0, high=4), None)), Case((g.t((0,)), None)), Case((g.t((3,), low=0, high=3), 4))],
    ref=lambda c: torch.repeat_interleave(c.args[0]),
    outs="tensor",
)
spec(
    "aten::mean.dtype_out", lambda g: [Case((g.t((3, 4), layout="t"), None)), Case((g.t((2, 3)), torch.float64))], tol=4
)
spec(
    "aten::var.out",
    lambda g: [Case((g.t((3, 4)), [1], True, False)), Case((g.t((2, 3, 4), layout="t"), None, False, True))],
    tol=10,
)
spec("aten::constant_pad_nd.out", pad_cases)
for _nsp in (1, 2, 3):
    spec([f"aten::reflection_pad{_nsp}d.out", f"aten::replication_pad{_nsp}d.out"], border_pad_cases(_nsp))
spec("aten::upsample_nearest2d.vec_out", lambda g: upsample_cases(g, True, False))
spec("aten::upsample_nearest2d.out", lambda g: upsample_cases(g, False, False))
spec("aten::upsample_bilinear2d.vec_out", lambda g: upsample_cases(g, True, True), tol=4)
spec("aten::upsample_bilinear2d.out", lambda g: upsample_cases(g, False, True), tol=4)
spec("aten::grid_sampler_2d.out", grid_sampler_cases, tol=10)
spec("aten::sort.values", lambda g: sort_cases(g, False))
spec("aten::sort.values_stable", lambda g: sort_cases(g, True))
spec("aten::topk.values", topk_cases)
spec("aten::_native_batch_norm_legit.out", bn_train_cases, tol=10, mutates=(3, 4))
spec("aten::_native_batch_norm_legit.no_stats_out", bn_no_stats_cases, tol=10)
spec("aten::_cdist_forward.out", cdist_cases, tol=10)
spec(
    "aten::_pdist_forward.out",
    lambda g: [Case((g.t((5, 3)), p)) for p in (2.0, 1.0, math.inf)] + [Case((g.t((1, 3)), 2.0))],
    tol=10,
)
spec("aten::as_strided_copy.out", as_strided_cases)
spec(
    ["aten::rand.out", "aten::randn.out"],
    lambda g: [Case(([2, 3],), (g.dtype,)), Case(([],), (g.dtype,))],
    values=False,
)
spec(
    "aten::native_dropout.out",
    lambda g: [
        Case((g.t((3, 4)), 0.5, False)),
        Case((g.t((3, 4), layout="t"), 0.0, True)),
        Case((g.t((2, 2)), 1.0, True)),
    ],
)
spec("aten::empty.out", lambda g: [Case(([2, 3], None), (g.dtype,)), Case(([0], None), (g.dtype,))], values=False)
spec(
    "dim_order_ops::_empty_dim_order.out",
    lambda g: [Case(([2, 3], None), (g.dtype,)), Case(([2, 3, 4, 5], [0, 2, 3, 1]), (g.dtype,))],
    ref=lambda c: torch.empty(c.args[0], dtype=c.out_dtypes[0]),
    outs="tensor",
    values=False,
)
spec("aten::fill.Scalar_out", lambda g: [Case((g.t(s, layout=lay), scalar_value(g))) for s, lay in UNARY_SHAPES[:6]])
spec("aten::fill.Tensor_out", lambda g: [Case((g.t(s, layout=lay), g.t(()))) for s, lay in UNARY_SHAPES[:6]])

# ---------------------------------------------------------------------------- report


def table(results: list[Result]) -> str:
    """Operator × dtype: ok / FAIL, blank where the kernel claims no such dtype."""
    cols = [*DTYPES, "-"]
    by_op: dict[str, dict[str, Result]] = {}
    for r in results:
        by_op.setdefault(r.name, {})[r.dtype] = r
    width = max(len(n) for n in by_op) if by_op else 10
    lines = [f"{'operator':<{width}}  " + " ".join(f"{c:>7}" for c in cols)]
    for name, row in by_op.items():
        cells = [("FAIL" if row[c].failures else "ok") if c in row else "" for c in cols]
        lines.append(f"{name:<{width}}  " + " ".join(f"{c:>7}" for c in cells))
    failed = sum(1 for r in results if r.failures)
    lines.append(f"{len(by_op)} operators, {len(results)} (operator, dtype) cases, {failed} failed")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*", help="operator names to check (default: all registered)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every failing case")
    opts = parser.parse_args(argv)
    results = check_all(opts.ops or None)
    print(table(results))
    for r in results:
        for f in r.failures if opts.verbose else r.failures[:1]:
            print(f"FAIL {r.name} [{r.dtype}] {f}", file=sys.stderr)
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
