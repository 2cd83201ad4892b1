"""Portable kernels: the numpy reference semantics, one operator family per module.

Importing this package registers every family; a trimmed runtime imports only the
family modules its programs need. `common` holds shared helpers and registers nothing.
"""

from etbuild.kernels.portable import (  # noqa: F401
    activation,
    compare,
    convolution,
    copy,
    creation,
    elementwise,
    index,
    linalg,
    normalization,
    padding,
    pooling,
    reduction,
    resample,
    sampling,
    shape,
    softmax,
    sorting,
)
