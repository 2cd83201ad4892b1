"""Conformance specs of the etbuild.kernels.quantized.embedding kernels: against torch's
`dequantize_per_channel_group` followed by `embedding`, the packed tables unpacked by torch
ops in ExecuTorch's order (4 bits: element 2j in the high nibble; 2 bits: element 4j in the
low bits; values stored plus 8 and plus 2)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from etbuild.lowering import quantized_ops  # noqa: F401  (torch's quantized_decomposed ops)
from tests.kernels.conformance import Case, Gen, SpecTable

SPECS = SpecTable()
qd = torch.ops.quantized_decomposed
BITS = {"embedding_byte": 8, "embedding_4bit": 4, "embedding_2bit": 2}


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Packed uint8 (rows, k) → int8 values (rows, k · 8 / bits), with torch ops."""
    if bits == 8:
        return packed
    per_byte = 8 // bits
    shifts = [4, 0] if bits == 4 else [2 * k for k in range(per_byte)]
    parts = [(packed.to(torch.int16) >> s) & ((1 << bits) - 1) for s in shifts]
    values = torch.stack(parts, dim=-1).reshape(packed.shape[0], -1)
    return (values - (1 << (bits - 1))).to(torch.int8)


def reference(bits: int, with_dtype: bool):  # noqa: ANN201
    def ref(case: Case) -> torch.Tensor:
        weight, scales, zeros, qmin, qmax, indices, *dtype = case.args
        values = unpack(weight, bits)
        groups = scales.shape[1] if scales.dim() == 2 else 1
        out_dtype = dtype[0] if with_dtype and dtype[0] is not None else scales.dtype
        table = qd.dequantize_per_channel_group(values, scales, zeros, qmin, qmax, values.dtype,
                                                values.shape[1] // groups, out_dtype)
        return torch.ops.aten.embedding(table, indices)

    return ref


def cases(bits: int, with_dtype: bool):  # noqa: ANN201
    qmin, qmax = (-128, 127) if bits == 8 else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)

    def make(g: Gen) -> Iterator[Case]:
        packed = 8 // bits
        for rows, columns, groups, indices, zeros in [(10, 8, 1, (4,), False), (7, 16, 4, (2, 3), True),
                                                      (5, 8, 2, (0,), False), (6, 32, 1, (3, 2, 2), True)]:
            if bits == 8:
                weight = g.t((rows, columns), low=qmin, high=qmax + 1)
            else:
                weight = torch.randint(0, 256, (rows, columns // packed), generator=g.g).to(torch.uint8)
            shape = (rows, groups) if groups > 1 else (rows,)
            scales = torch.rand(shape, generator=g.g) * 0.1 + 1e-3
            zero_points = torch.randint(-3, 4, shape, generator=g.g).to(scales.dtype) if zeros else None
            extra = (torch.float16,) if with_dtype and zeros else (None,) if with_dtype else ()
            yield Case((weight, scales, zero_points, qmin, qmax, g.index(indices, rows), *extra))

    return make


for name, bits in BITS.items():
    SPECS.add(f"quantized_decomposed::{name}.out", cases(bits, False), ref=reference(bits, False), outs="tensor")
    SPECS.add(f"quantized_decomposed::{name}.dtype_out", cases(bits, True), ref=reference(bits, True),
              outs="tensor")
