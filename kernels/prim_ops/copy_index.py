"""executorch_prim::et_copy_index.tensor: the accumulator of scan/map loops.

Called as (copy_to, copy_from, index): copy_to grows to at least index + 1 rows of
copy_from's shape, then row `index` becomes copy_from. Growing needs copy_to to be planned
DYNAMIC_BOUND; the resized view is returned, and the caller must keep it in place of
copy_to (the op has no result value of its own in a program).
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.runtime.kernel_registry import ALL_DTYPES, kernel
from etbuild.runtime.tensor import resize


@kernel("executorch_prim::et_copy_index.tensor", dtypes=ALL_DTYPES)
def et_copy_index_tensor(copy_to: np.ndarray, copy_from: np.ndarray, index: int) -> np.ndarray:
    if copy_to.ndim != copy_from.ndim + 1:
        raise KernelError(f"et_copy_index: {list(copy_to.shape)} must have one dim more than {list(copy_from.shape)}")
    if index < 0:
        raise KernelError(f"et_copy_index: negative index {index}")
    if copy_to.shape[0] < index + 1 or copy_to.shape[1:] != copy_from.shape:
        copy_to = resize(copy_to, (max(index + 1, copy_to.shape[0]), *copy_from.shape))
    np.copyto(copy_to[index, ...], copy_from, casting="unsafe")
    return copy_to
