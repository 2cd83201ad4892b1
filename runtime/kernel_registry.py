"""The kernel registry: operator name -> numpy out-variant kernel. Part of the runtime's contract.

Kernel libraries (`etbuild.kernels.*`) import this module to register; the runtime looks
kernels up here and imports the default libraries by name (`KERNEL_LIBRARIES`) in `load_all`,
as ExecuTorch's kernels register with its runtime's operator registry.

Kernels register with `@kernel("aten::add.out", dtypes=...)` keyed by the canonical name
`namespace::op.overload` (`aten::copy_` when the overload is empty). The decorator returns
the function unchanged and raises on a duplicate name. Selective build reads this registry.

The kernel ABI (what the runtime passes):
- arguments in the operator schema's order, the trailing return value(s) left out;
- tensors are numpy arrays of the tensor's logical shape (a view into planned memory or
  constant data); Int/Double/Bool are Python scalars, Null is None, IntList/DoubleList/
  BoolList are lists, TensorList is a list of arrays, OptionalTensorList has None holes;
  a ScalarType argument (`dtype`) is its integer code (see etbuild.runtime.tensor);
- an out-variant writes into its `out` array(s) and returns them; when the result shape
  differs from the planned one (dynamic shapes) it first calls `resize(out, shape)`;
- a non-out op (prim ops, sym_size) returns its result value.

Parameter annotations are part of the ABI: each parameter's annotation (see `ANNOTATION_KINDS`)
says which argument values it admits, and the runtime refuses, at load, a program that passes
anything else, so a kernel sees only arguments of the kinds it declares. Kernel modules use
postponed annotations (`from __future__ import annotations`), which are read as strings here
and never evaluated.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KernelFn = Callable[..., Any]
Scalar = bool | int | float  # an ATen Scalar: an Int, Double or Bool value
# Integers with a bound the runtime checks at load when the argument is a constant (strides,
# kernel sizes, dilations, groups are at least 1; paddings and sizes at least 0).
PositiveInt = int
PositiveInts = list[int]
NonNegativeInts = list[int]

# The kernel libraries of the full runtime, imported by name the first time kernels are needed.
KERNEL_LIBRARIES = (
    "etbuild.kernels.portable", "etbuild.kernels.prim_ops", "etbuild.kernels.quantized", "etbuild.kernels.llm",
)

FLOAT_DTYPES = ("float32", "float64", "float16")
INT_DTYPES = ("uint8", "int8", "int16", "int32", "int64")
REAL_DTYPES = FLOAT_DTYPES + INT_DTYPES
ALL_DTYPES = REAL_DTYPES + ("bool",)


# The argument kinds, one letter per parameter annotation of the kernel ABI. The runtime maps
# each letter to the value types it admits (etbuild.runtime.checks.KIND_TYPES). A number
# (`float`, `Scalar`) admits a Double, an Int or a Bool, as Python's numeric tower does.
ANNOTATION_KINDS = {
    "np.ndarray": "T",  # Tensor
    "np.ndarray | None": "t",  # Tensor or Null
    "int": "i",  # Int
    "int | None": "j",  # Int or Null (also ScalarType and MemoryFormat codes)
    "float": "f",  # Double, Int or Bool
    "Scalar": "f",
    "float | None": "g",  # a number or Null
    "bool": "b",  # Bool
    "bool | None": "c",
    "str": "z",  # String
    "str | None": "y",
    "list[int]": "L",  # IntList
    "PositiveInts": "P",  # IntList of items >= 1
    "NonNegativeInts": "N",  # IntList of items >= 0
    "PositiveInt": "p",  # Int >= 1
    "list[int] | None": "M",
    "list[float] | None": "D",  # DoubleList or Null
    "list[np.ndarray]": "X",  # TensorList
    "list[np.ndarray | None]": "Y",  # OptionalTensorList
}
# Result annotations: a tensor, an Int, a number, or several tensors (a TensorList result value).
RESULT_KINDS = {"np.ndarray": "T", "int": "i", "Scalar": "f", "list[np.ndarray]": "X"}


@dataclass(frozen=True)
class KernelInfo:
    """A registered kernel: its canonical name, function, defining module, claimed dtypes,
    argument kinds (one letter per parameter, then the result's after `>`; see ANNOTATION_KINDS)
    the check of its arguments that the runtime runs at load, its load-time fast path and view, and whether its
    result is a pure view (see `kernel`)."""

    name: str
    fn: KernelFn
    module: str
    dtypes: tuple[str, ...]
    kinds: str
    check: KernelFn | None = None
    fast: KernelFn | None = None
    view: KernelFn | None = None
    pure: bool = False
    mutates: tuple[int, ...] = ()
    live: tuple[int, ...] = ()

    @property
    def params(self) -> str:
        """The kind letter of each parameter."""
        return self.kinds.partition(">")[0]


_REGISTRY: dict[str, KernelInfo] = {}


def kernel(
    name: str,
    dtypes: tuple[str, ...] = FLOAT_DTYPES,
    check: KernelFn | None = None,
    fast: KernelFn | None = None,
    view: KernelFn | None = None,
    pure: bool = False,
    mutates: tuple[int, ...] = (),
    live: tuple[int, ...] = (),
) -> Callable[[KernelFn], KernelFn]:
    """Register fn as the kernel for `name`; `dtypes` are the dtypes it claims (of its inputs,
    or of its output for creation ops such as `full` and `arange`).

    check: takes the kernel's arguments and raises KernelError when they do not fit together
    (a padding wider than half the kernel); the runtime calls it once at load when every
    argument is known then (tensors at their planned shapes: a check may rely on a dynamic
    tensor's rank, not its sizes), so a malformed program is refused before it runs.
    pure: the kernel returns a view of its input determined by its arguments alone (`et_view`): a call with the
    same arguments as the previous one may keep the previous result (etbuild.runtime.steady).
    mutates: the parameters (by index) the kernel writes in place besides its result (`llama::update_cache`
    writes its cache): what reads them later must see the write (etbuild.runtime.aliasing).
    live: int parameters (by index) that `fast` takes either as a number or as a zero-argument callable returning
    the number at each call: a call whose arrays stay the same while such a number moves (a KV cache's position at
    each decode step) keeps its bound fast path (etbuild.runtime.steady).
    """
    if "::" not in name:
        raise ValueError(f"kernel name {name!r} must be 'namespace::op.overload'")

    def register(fn: KernelFn) -> KernelFn:
        if name in _REGISTRY:
            raise ValueError(f"kernel {name} is already registered by {_REGISTRY[name].module}")
        kinds = argument_kinds(name, fn)
        _REGISTRY[name] = KernelInfo(name, fn, fn.__module__, tuple(dtypes), kinds, check, fast, view, pure,
                                     tuple(mutates), tuple(live))
        return fn

    return register


def argument_kinds(name: str, fn: KernelFn) -> str:
    """The kinds of fn's parameters and result, from its annotations: `"TTfT>T"` for add.out
    (a `tuple[...]` result is several tensors: `X`).

    A trimmed runtime, whose kernels ship without annotations, replaces this function by a
    table of its kernels' kinds (written by etbuild.select).
    """
    annotations = dict(fn.__annotations__)
    result = annotations.pop("return", None)
    params = list(inspect.signature(fn).parameters)
    if list(annotations) != params:
        raise ValueError(f"kernel {name}: every parameter needs an annotation (the runtime checks arguments by them)")
    kinds = [_kind(name, ANNOTATION_KINDS, ann) for ann in annotations.values()]
    tuple_result = isinstance(result, str) and result.startswith("tuple[")
    return "".join(kinds) + ">" + ("X" if tuple_result else _kind(name, RESULT_KINDS, result))


def _kind(name: str, table: dict[str, str], annotation: Any) -> str:
    if not isinstance(annotation, str) or annotation not in table:
        raise ValueError(
            f"kernel {name}: annotation {annotation!r} is not one of the kernel ABI's ({', '.join(table)}); "
            "kernel modules use `from __future__ import annotations`"
        )
    return table[annotation]


def canonical_name(name: str, overload: str) -> str:
    """`aten::add` + `out` -> `aten::add.out`; an empty overload adds nothing."""
    return f"{name}.{overload}" if overload else name


def registered() -> dict[str, KernelInfo]:
    """A snapshot of every registered kernel, by name."""
    return dict(_REGISTRY)


def load_all() -> dict[str, KernelInfo]:
    """Import the kernel libraries this runtime ships (KERNEL_LIBRARIES) and return their kernels.

    The libraries are named, not imported in code: kernels depend on this registry, never the
    reverse. A trimmed runtime (written by etbuild.select) replaces this function: it returns
    only the kernels its generated `etbuild.kernels.selected` imports and lists.
    """
    for library in KERNEL_LIBRARIES:
        importlib.import_module(library)  # registers its kernels on import
    return registered()
