"""What the runtime executes: a step, one zero-argument callable bound at load.

A method's steps (see etbuild.runtime.binding) and a delegate's node steps (the XNNPACK runtime's)
are this one type. A step's result is ignored, except a method's jump step, which returns the
index of the next instruction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Step = Callable[[], Any]
