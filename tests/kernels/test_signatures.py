"""Every kernel takes exactly its operator's schema arguments (the runtime binds by count)."""

from __future__ import annotations

import inspect

import pytest

from etbuild.kernels.registry import load_all
from tests.kernels import conformance

REGISTRY = load_all()
# Schemas torch cannot show without the executorch package: argument counts, outs included.
NON_TORCH = {
    "dim_order_ops::_to_dim_order_copy.out": 4,
    "dim_order_ops::_clone_dim_order.out": 4,
    "dim_order_ops::_empty_dim_order.out": 3,
    "et_copy::_h2d_copy.out": 2,
    "et_copy::_d2h_copy.out": 2,
    "executorch_prim::et_copy_index.tensor": 3,
}


def schema_arity(name: str) -> int:
    op = conformance.torch_op(name)
    if op is not None:
        return len(op._schema.arguments)
    if name in NON_TORCH:
        return NON_TORCH[name]
    first = next(iter(conformance.specs()[name].cases(conformance.Gen(name, None))))
    return len(first.args)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_kernel_parameters_match_the_schema(name: str) -> None:
    params = inspect.signature(REGISTRY[name].fn).parameters.values()
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params)
    assert len(params) == schema_arity(name)


def test_kernels_are_named_after_their_operator_and_family() -> None:
    for name, info in REGISTRY.items():
        assert info.module.startswith(("etbuild.kernels.portable.", "etbuild.kernels.prim_ops.")), name
        assert not info.module.endswith(".common"), name
        base = name.split("::")[1].split(".")[0]
        assert info.fn.__name__.startswith(base.lstrip("_")) or info.fn.__name__.startswith(base), name
