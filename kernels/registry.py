"""The kernel registry: operator name -> numpy out-variant kernel.

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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KernelFn = Callable[..., Any]

FLOAT_DTYPES = ("float32", "float64", "float16")
INT_DTYPES = ("uint8", "int8", "int16", "int32", "int64")
REAL_DTYPES = FLOAT_DTYPES + INT_DTYPES
ALL_DTYPES = REAL_DTYPES + ("bool",)


@dataclass(frozen=True)
class KernelInfo:
    """A registered kernel: its canonical name, function, defining module and claimed dtypes."""

    name: str
    fn: KernelFn
    module: str
    dtypes: tuple[str, ...]


_REGISTRY: dict[str, KernelInfo] = {}


def kernel(name: str, dtypes: tuple[str, ...] = FLOAT_DTYPES) -> Callable[[KernelFn], KernelFn]:
    """Register fn as the kernel for `name`; `dtypes` are the dtypes it claims (of its inputs,
    or of its output for creation ops such as `full` and `arange`)."""
    if "::" not in name:
        raise ValueError(f"kernel name {name!r} must be 'namespace::op.overload'")

    def register(fn: KernelFn) -> KernelFn:
        if name in _REGISTRY:
            raise ValueError(f"kernel {name} is already registered by {_REGISTRY[name].module}")
        _REGISTRY[name] = KernelInfo(name, fn, fn.__module__, tuple(dtypes))
        return fn

    return register


def canonical_name(name: str, overload: str) -> str:
    """`aten::add` + `out` -> `aten::add.out`; an empty overload adds nothing."""
    return f"{name}.{overload}" if overload else name


def registered() -> dict[str, KernelInfo]:
    """A snapshot of every registered kernel, by name."""
    return dict(_REGISTRY)


def load_all() -> dict[str, KernelInfo]:
    """Import the kernel libraries this runtime ships and return their kernels.

    A trimmed runtime (written by etbuild.select) replaces this function: it returns only
    the kernels its generated `etbuild.kernels.selected` imports and lists.
    """
    import etbuild.kernels.portable  # noqa: F401  (registers on import)
    import etbuild.kernels.prim_ops  # noqa: F401
    import etbuild.kernels.quantized  # noqa: F401

    return registered()
