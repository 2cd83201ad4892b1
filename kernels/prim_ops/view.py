"""executorch_prim::et_view.default: a tensor's memory under another shape, without a copy.

ExecuTorch's flow emits it for a `view` whose input is dynamically shaped: the result is an
unplanned tensor that aliases its input. Called as (self, size) with the result value after
them; `size` may hold one -1 (inferred), as `Tensor.view` allows. The numbers must multiply
to the input's element count, and the returned view replaces the result value each call (a call with the
same input array and sizes as the previous one keeps the previous view: etbuild.runtime.steady).
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.runtime.kernel_registry import ALL_DTYPES, kernel


@kernel("executorch_prim::et_view.default", dtypes=ALL_DTYPES, pure=True)
def et_view(x: np.ndarray, size: list[int]) -> np.ndarray:
    if sum(s == -1 for s in size) > 1 or any(s < -1 for s in size):
        raise KernelError(f"et_view: size {list(size)} may hold one -1 and no other negative number")
    try:
        view = x.view()
        view.shape = tuple(size)  # raises instead of copying when the memory cannot take the shape
    except (ValueError, AttributeError) as exc:  # numpy: ValueError for a count, AttributeError for strides
        raise KernelError(f"et_view: a {list(x.shape)} tensor cannot be viewed as {list(size)}: {exc}") from None
    return view
