"""Kernel conformance: every registered kernel against the torch operator it implements.

One helper (`check`) does the comparison for every op: it builds torch inputs from the op's
case generator, runs torch (the functional overload matching the out-variant's arguments,
the out-variant itself when a case fixes the out dtypes, or the spec's own reference), turns
the inputs into numpy the way the runtime passes them (strides kept, dtypes as ScalarType
codes), allocates outs of the expected shape and dtype (contiguous, strided, or dynamically
bounded with a wrong initial shape), calls the kernel and compares: exactly for integers and
bools, with dtype-scaled tolerances for floats. Inputs must come back unchanged.

The specs sit beside the kernels' own tests, one file per kernel module, named after it: the
kernels of `etbuild.kernels.portable.pooling` have theirs in `tests/kernels/portable/pooling.py`,
in a `SpecTable` named `SPECS`. `specs()` finds the files from the kernel registry, so a new
kernel family needs one new spec file and nothing else. A registered kernel without a spec
fails the coverage test. `python -m tests.kernels.conformance` (from the repository root)
prints the operator × dtype table.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import math
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from etbuild.runtime.kernel_registry import KernelInfo, load_all
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


class SpecTable(dict[str, OpSpec]):
    """One kernel family's specs by kernel name: the `SPECS` of a spec file."""

    def add(self, names: str | Iterable[str], cases: CaseFn, **kw: Any) -> None:
        """Register one spec for one or several kernel names."""
        for name in [names] if isinstance(names, str) else names:
            if name in self:
                raise ValueError(f"conformance spec for {name} is defined twice")
            self[name] = OpSpec(cases, **kw)


def spec_module(kernel_module: str) -> str:
    """The spec module of a kernel module, as tests mirror modules: etbuild.kernels.portable.pooling ->
    tests.kernels.portable.pooling."""
    return "tests." + kernel_module.removeprefix("etbuild.")


def family_specs(module: str) -> SpecTable:
    """The `SPECS` of one spec module; empty when the module does not exist."""
    try:
        return importlib.import_module(module).SPECS
    except ModuleNotFoundError as e:
        if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            return SpecTable()
        raise


@functools.cache
def specs() -> dict[str, OpSpec]:
    """Every spec by kernel name, from the spec module of each kernel module in the registry."""
    table: dict[str, OpSpec] = {}
    for module in sorted({info.module for info in load_all().values()}):
        family = family_specs(spec_module(module))
        if twice := sorted(table.keys() & family.keys()):
            raise ValueError(f"{spec_module(module)} defines specs that another family defines: {twice}")
        table.update(family)
    return table


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
    sp = specs()[name]
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
        if name not in specs():
            results.append(Result(name, "-", failures=[f"no conformance spec in {spec_module(info.module)}"]))
            continue
        for dtype in info.dtypes or (None,):
            results.append(check(name, dtype, info))
    return results


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
    from tests.kernels import conformance  # the module the spec files import, not this copy run as __main__

    sys.exit(conformance.main())
