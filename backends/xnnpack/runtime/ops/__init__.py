"""The node builders, one module per family; importing this package registers them all in BUILDERS."""

from etbuild.backends.xnnpack.runtime.ops import conv, elementwise, gemm, layout, pooling, softmax  # noqa: F401
from etbuild.backends.xnnpack.runtime.ops.base import BUILDERS, Context, Op

__all__ = ["BUILDERS", "Context", "Op"]
