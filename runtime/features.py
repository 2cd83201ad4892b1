"""Optional runtime features: what a program may need beyond straight-line kernel calls.

Every flag is True here, in the full runtime. Selective build computes the features a
product's programs use (`etbuild.select.features`) and writes a trimmed runtime with the
others off: codegen replaces each `features.NAME` read by its value and drops the code
that becomes dead, so an MLP's runtime ships no jump loop, no resizable tensors, no list
bookkeeping. Runtime code reads the flags only as `features.NAME`, and code behind an off
flag raises `missing(NAME, where)` instead of running, so a trimmed runtime given a program
it was not built for says which feature it lacks rather than computing something wrong.
(Values and instructions whose types the trimmed schema dropped are rejected earlier, by
the reader.)
"""

from __future__ import annotations

from etbuild.errors import InvalidProgram

CONTROL_FLOW = True  # JumpFalseCall and MoveCall instructions (torch.cond), under an instruction budget
DELEGATES = True  # DelegateCall instructions
DIM_ORDER = True  # tensors stored in a non-contiguous dim order
DTYPE_PROMOTION = True  # kernel calls whose tensors are not all float32 or all float64 (mixed dtypes,
# integers, float16): kernels keep their type-promotion paths
DYNAMIC_SHAPES = True  # tensors whose shape changes at run time, below a planned upper bound
EXTERNAL_DATA = True  # tensors whose data lives in a `.ptd` data file, by key; data files given at load
# (etbuild.runtime.data_files), where delegates' named data may live too
LIVE_VALUES = True  # values whose object changes while a method runs (prim-op results, caller-supplied,
# unplanned or dynamic tensors): read live, and kept in sync in the lists that hold them
MEMORY_LEVELS = True  # more than one planned memory buffer; caller buffers by memory level name
MUTABLE_STATE = True  # tensors whose initial state comes from a mutable-data segment
PRELOAD = True  # instructions that read only constants (dequantized weights), run once at load
SCALAR_INPUTS = True  # method inputs that are Int, Double or Bool values
VALUE_LISTS = True  # IntList, DoubleList, BoolList, TensorList and OptionalTensorList values

NAMES = (
    "CONTROL_FLOW", "DELEGATES", "DIM_ORDER", "DTYPE_PROMOTION", "DYNAMIC_SHAPES", "EXTERNAL_DATA", "LIVE_VALUES",
    "MEMORY_LEVELS", "MUTABLE_STATE", "PRELOAD", "SCALAR_INPUTS", "VALUE_LISTS",
)


def missing(name: str, where: str) -> InvalidProgram:
    """The error for something at `where` that needs feature `name`, which this runtime lacks."""
    return InvalidProgram(
        f"{where} needs the runtime feature {name}, which this trimmed runtime lacks "
        "(etbuild select builds the runtime a program needs)"
    )
