"""What a recipe may set for the plain TOSA backend (`backends: [{name: tosa}]`): nothing yet. Torch-free.

Its partitions are integer graphs (TOSA-1.0+INT), so it asks the quantizer for the NPU mode (int32 biases).
"""

from __future__ import annotations

from dataclasses import dataclass

QUANTIZER_MODE = "npu-int8"
TOSA_SPEC = "TOSA-1.0+INT"


@dataclass(frozen=True)
class TosaOptions:
    """The TOSA backend's options (none): every partition is lowered to the TOSA-1.0+INT profile."""


OPTIONS = TosaOptions
