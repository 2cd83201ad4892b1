"""Conformance specs of the etbuild.kernels.prim_ops.copy_index kernels: their cases against torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from etbuild.runtime.tensor import bounded
from tests.kernels.conformance import Case, SpecTable

SPECS = SpecTable()


def stack_by_copy_index(fn: Callable[..., Any], args: list[Any]) -> np.ndarray:
    """Grow a bounded accumulator row by row as a scan loop does."""
    rows = args[0]
    storage = np.zeros(max(len(rows) * rows[0].nbytes, 1), dtype=np.uint8)
    acc = bounded(storage, rows[0].dtype, (0, *rows[0].shape))
    for i, row in enumerate(rows):
        acc = fn(acc, row, i)
    return acc


SPECS.add(
    "executorch_prim::et_copy_index.tensor",
    lambda g: [Case(([g.t((3, 4)) for _ in range(4)],)), Case(([g.t(())],)), Case(([g.t((2, 0)) for _ in range(3)],))],
    ref=lambda c: torch.stack(c.args[0]),
    run=stack_by_copy_index,
    outs="none",
)
