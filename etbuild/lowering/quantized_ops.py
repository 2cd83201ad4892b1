"""The `quantized_decomposed` out-variants ExecuTorch's runtime registers, as schema strings.

torch defines the functional `quantized_decomposed` ops a converted pt2e graph calls, but
their `.out` variants exist in torch only once executorch's kernel library is loaded. etbuild
does not import executorch, and registering the schemas itself would collide with executorch
in a process that loads both (a second definition raises). So this table holds the schemas as
text, parsed with `torch._C.parse_schema`, which registers nothing; the out-variant lookup
(`out_variants.out_schema`) reads it for this namespace whether or not torch knows the ops.
The schemas are those ExecuTorch's quantized kernel library registers (XNNPACK-FORMAT.md §6);
`tests/interop` checks them against the oracle's.

`ProgramOp` is a call target for operators torch has no functional form of at all
(`embedding_byte`, `embedding_4bit`): a lowering step puts one in the graph, and to-program
emits its out-variant call.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines torch's functional quantized_decomposed ops)
from torch._ops import OpOverload

from etbuild.errors import StageError

NAMESPACE = "quantized_decomposed"
_OUT = "*, Tensor(a!) out) -> Tensor(a!)"
_QPARAMS_OUT = "*, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))"
_EMBEDDING = "Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, " \
             "int weight_quant_max, Tensor indices"

OUT_SCHEMAS = tuple(f"{NAMESPACE}::{text}" for text in (
    f"quantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
    f"ScalarType dtype, {_OUT}",
    f"quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, "
    f"ScalarType dtype, {_OUT}",
    "dequantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
    "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    "dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, "
    "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    f"quantize_per_channel.out(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, "
    f"int quant_max, ScalarType dtype, {_OUT}",
    "dequantize_per_channel.out(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, "
    "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    f"choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, "
    f"{_QPARAMS_OUT}",
    f"choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype, {_QPARAMS_OUT}",
    f"quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
    f"ScalarType dtype, {_OUT}",
    f"dequantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
    f"ScalarType dtype, ScalarType output_dtype, {_OUT}",
    f"embedding_byte.out({_EMBEDDING}, {_OUT}",
    f"embedding_byte.dtype_out({_EMBEDDING}, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)",
    f"embedding_2bit.out({_EMBEDDING}, {_OUT}",
    f"embedding_2bit.dtype_out({_EMBEDDING}, ScalarType? dtype=None, {_OUT}",
    f"embedding_4bit.out({_EMBEDDING}, {_OUT}",
    f"embedding_4bit.dtype_out({_EMBEDDING}, ScalarType? dtype=None, {_OUT}",
))

DELEGATE_ONLY = {
    f"{NAMESPACE}::dequantize_per_channel_group": "int4 linear weights run in ExecuTorch only inside the XNNPACK "
                                                  "delegate (quantize.scheme int8-dynamic-int4-weight needs it)",
}
"""Operators ExecuTorch's portable kernels do not run, and why."""


@cache
def table() -> dict[str, tuple[torch._C.FunctionSchema, ...]]:
    """Operator name (`quantized_decomposed::quantize_per_tensor`) → its out-variant schemas."""
    found: dict[str, list[torch._C.FunctionSchema]] = {}
    for text in OUT_SCHEMAS:
        schema = torch._C.parse_schema(text)
        found.setdefault(schema.name, []).append(schema)
    return {name: tuple(schemas) for name, schemas in found.items()}


@cache
def schema(name: str) -> torch._C.FunctionSchema:
    """The out-variant schema called `name` (`quantized_decomposed::embedding_byte.out`)."""
    op, _, overload = name.partition(".")
    for candidate in table().get(op, ()):
        if candidate.overload_name == overload:
            return candidate
    raise KeyError(f"no out-variant {name} in the quantized operator table")


def _inputs(s: torch._C.FunctionSchema) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in s.arguments if not a.is_out]


def table_out_schema(op: OpOverload) -> torch._C.FunctionSchema | None:
    """The table's out-variant of a functional `quantized_decomposed` op (None outside the
    namespace); a StageError when the op has none, saying why when ExecuTorch runs it only in a delegate."""
    name = op._schema.name
    if not name.startswith(f"{NAMESPACE}::"):
        return None
    want = _inputs(op._schema)
    for candidate in table().get(name, ()):
        if _inputs(candidate) == want:
            return candidate
    reason = DELEGATE_ONLY.get(name, "ExecuTorch's quantized kernel library has no out-variant of it")
    raise StageError(f"operator {name}.{op._overloadname} has no out-variant to call: {reason}")


class ProgramOp:
    """A graph call target for an out-variant torch does not define: lowering emits `schema`."""

    def __init__(self, name: str) -> None:
        self.schema = schema(name)
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise StageError(f"{self.__name__} is a program operator; it runs in the program, not in torch")

    def __repr__(self) -> str:
        return self.__name__
