"""etbuild: YAML recipes to verified ExecuTorch-format programs (.pte) and trimmed runtimes.

This module stays free of torch imports: `etbuild.runtime` and `etbuild.kernels` must import on
a machine with only numpy and flatbuffers.
"""

__version__ = "0.1.0"
