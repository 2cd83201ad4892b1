"""Every kernel takes exactly its operator's schema arguments (the runtime binds by count)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from etbuild.lowering import quantized_ops
from etbuild.runtime.checks import KIND_TYPES
from etbuild.runtime.kernel_registry import Scalar, argument_kinds, load_all
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
    "llama::custom_sdpa.out": 9,  # ../shared/LLM.md's schemas (torch.ops.llama exists once executorch's loaded)
    "llama::custom_quantized_sdpa.out": 16,
    "llama::sdpa_with_kv_cache.out": 12,
    "llama::update_cache.out": 4,
    "llama::update_cache_with_indices.out": 5,
}


def schema_arity(name: str) -> int:
    if name.startswith(f"{quantized_ops.NAMESPACE}::"):  # out-variants torch knows only with executorch loaded
        return len(quantized_ops.schema(name).arguments)
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


FAMILIES = ("portable", "prim_ops", "quantized", "llm")


def test_kernels_are_named_after_their_operator_and_family() -> None:
    for name, info in REGISTRY.items():
        assert info.module.startswith(tuple(f"etbuild.kernels.{family}." for family in FAMILIES)), name
        assert not info.module.endswith(".common"), name
        base = name.split("::")[1].split(".")[0]
        assert info.fn.__name__.startswith(base.lstrip("_")) or info.fn.__name__.startswith(base), name


# The value types ExecuTorch passes for each ATen argument type (etbuild.runtime.checks.KIND_TYPES
# names the same types for our kernels' annotations).
ATEN_VALUE_TYPES = {
    "Tensor": {"Tensor"},
    "int": {"Int"},
    "float": {"Double"},
    "number": {"Double", "Int", "Bool"},  # Scalar
    "bool": {"Bool"},
    "str": {"String"},
    "ScalarType": {"Int"},
    "MemoryFormat": {"Int"},
    "List[int]": {"IntList"},
    "List[float]": {"DoubleList"},
    "List[Tensor]": {"TensorList"},
    "List[Optional[Tensor]]": {"OptionalTensorList"},
}
NUMBERS = {"Double", "Int", "Bool"}  # a float annotation admits any number, as Python's does


def aten_value_types(type_str: str) -> set[str]:
    if type_str.startswith("Optional["):
        return ATEN_VALUE_TYPES[type_str[len("Optional[") : -1]] | {"Null"}
    return ATEN_VALUE_TYPES[type_str]


@pytest.mark.parametrize("name", sorted(n for n in REGISTRY if conformance.torch_op(n) is not None))
def test_annotations_admit_what_the_schema_passes(name: str) -> None:
    """The argument kinds the runtime checks (from annotations) admit exactly the ATen schema's types."""
    schema = conformance.torch_op(name)._schema
    params, _, result = REGISTRY[name].kinds.partition(">")
    for arg, kind in zip(schema.arguments, params):
        aten = aten_value_types(str(arg.real_type))
        ours = set(KIND_TYPES[kind].split())
        widened = NUMBERS if "float" in str(arg.real_type) else set()
        assert aten <= ours <= aten | widened, f"{name} argument {arg.name}: {arg.real_type} vs {ours}"
    returns = [str(r.type) for r in schema.returns]
    expected = {("Tensor",): "T", ("int",): "i", ("number",): "f", ("Scalar",): "f"}.get(tuple(returns), "X")
    assert result == expected, f"{name} returns {returns}"


def test_kinds_come_from_annotations_and_unknown_ones_are_refused() -> None:
    def good(x: np.ndarray, dims: list[int] | None, alpha: Scalar, out: np.ndarray) -> np.ndarray:
        return out

    def bad(x: np.ndarray, weird: dict) -> np.ndarray:
        return x

    assert argument_kinds("test::good.out", good) == "TMfT>T"
    with pytest.raises(ValueError, match=r"kernel test::bad.out: annotation 'dict' is not one of the kernel ABI's"):
        argument_kinds("test::bad.out", bad)
