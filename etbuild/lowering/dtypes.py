"""torch dtype <-> ScalarType codes of the program format."""

from __future__ import annotations

import torch

from etbuild.errors import StageError
from etbuild.runtime.format.program import ScalarType

TORCH_TO_SCALAR_TYPE = {
    torch.uint8: ScalarType.BYTE,
    torch.int8: ScalarType.CHAR,
    torch.int16: ScalarType.SHORT,
    torch.int32: ScalarType.INT,
    torch.int64: ScalarType.LONG,
    torch.float16: ScalarType.HALF,
    torch.float32: ScalarType.FLOAT,
    torch.float64: ScalarType.DOUBLE,
    torch.bool: ScalarType.BOOL,
    torch.bfloat16: ScalarType.BFLOAT16,
    torch.uint16: ScalarType.UINT16,
    torch.uint32: ScalarType.UINT32,
    torch.uint64: ScalarType.UINT64,
}


def scalar_type(dtype: torch.dtype) -> int:
    """The ScalarType code of a torch dtype."""
    try:
        return TORCH_TO_SCALAR_TYPE[dtype]
    except KeyError:
        raise StageError(f"dtype {dtype} has no ScalarType in the program format") from None


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The contiguous little-endian bytes of a tensor."""
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()
