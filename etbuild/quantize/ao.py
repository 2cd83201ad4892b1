"""torchao's pt2e API, imported once and quietly: the one place etbuild names torchao.

On a CPU-only machine torchao logs a warning for each CUDA extension it cannot load, and torch
logs a deprecation note while torchao registers its enums; neither concerns a CPU build, so
both loggers are held at ERROR while torchao is imported and restored afterwards.
"""

from __future__ import annotations

import logging

_NOISY = ("torchao", "torch.utils._pytree")


def _quiet_import() -> None:
    loggers = [logging.getLogger(name) for name in _NOISY]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        import torchao.quantization.pt2e  # noqa: F401
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


_quiet_import()

from torchao.quantization.pt2e.observer import (  # noqa: E402
    HistogramObserver,
    MinMaxObserver,
    PerChannelMinMaxObserver,
    PlaceholderObserver,
    UniformQuantizationObserverBase,
)
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402
from torchao.quantization.pt2e.quantizer import (  # noqa: E402
    DerivedQuantizationSpec,
    QuantizationAnnotation,
    QuantizationSpec,
    QuantizationSpecBase,
    Quantizer,
    SharedQuantizationSpec,
)

ANNOTATION = "quantization_annotation"
"""The node meta key prepare_pt2e reads annotations from."""

__all__ = [
    "ANNOTATION",
    "DerivedQuantizationSpec",
    "HistogramObserver",
    "MinMaxObserver",
    "PerChannelMinMaxObserver",
    "PlaceholderObserver",
    "QuantizationAnnotation",
    "QuantizationSpec",
    "QuantizationSpecBase",
    "Quantizer",
    "SharedQuantizationSpec",
    "UniformQuantizationObserverBase",
    "convert_pt2e",
    "prepare_pt2e",
]
