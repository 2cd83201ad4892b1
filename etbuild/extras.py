"""Optional dependencies: import one, or say which extra of etbuild installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from etbuild.errors import UsageError


def require(module: str, extra: str) -> ModuleType:
    """Import `module`; a UsageError naming `pip install 'etbuild[extra]'` when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(
            f"this needs the Python package {module.split('.')[0]!r}, which is not installed "
            f"({exc}); install it with: pip install 'etbuild[{extra}]'"
        ) from None
