"""Export shapes as XNNPACK dims: static sizes as ints, a symbolic one as a DynamicSize at its bound."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from etbuild.backends.xnnpack.aot.builder import DynamicSize
from etbuild.graphs.method import upper_bound


def sizes(shape: Sequence[Any]) -> tuple[int, ...]:
    """Static sizes as ints, symbolic ones as DynamicSize at their upper bounds."""
    return tuple(s if isinstance(s, int) else DynamicSize(upper_bound(s)) for s in shape)
