"""The operator rules, one module per family; importing this package registers them all in RULES."""

from etbuild.backends.xnnpack.aot.ops import (  # noqa: F401
    conv,
    elementwise,
    gemm,
    norm,
    pooling,
    quant,
    resize,
    shape,
)
from etbuild.backends.xnnpack.aot.ops.base import RULES, Checker, Rule, decomposes

__all__ = ["RULES", "Checker", "Rule", "decomposes"]
