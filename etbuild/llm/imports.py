"""Import transformers where torchvision's C extension does not load beside this torch.

transformers imports torchvision when it is installed; a torchvision wheel built for another
torch then stops on a fake-kernel registration for `torchvision::nms`. Decoders need nothing of
torchvision, so the two schemas that import registers kernels for are defined first when the
extension did not define them (tests/models/zoo.py does the same for the real-model tier).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

_LIBRARIES: list[Any] = []


def transformers() -> ModuleType:
    """The `transformers` package, imported."""
    if not _LIBRARIES and not hasattr(torch.ops.torchvision, "nms"):
        library = torch.library.Library("torchvision", "FRAGMENT")
        for name in ("nms", "qnms"):
            library.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIBRARIES.append(library)
    import transformers as module

    return module
