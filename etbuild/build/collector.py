"""When CPython's cyclic garbage collector runs in a build process.

A build holds a few hundred thousand objects that live as long as the process (torch's modules,
the model library's) and makes as many again per stage (models, graphs, ASTs). Each of the
collector's full passes walks all of them, and it makes one whenever the objects that survived
grew by a quarter: 9 passes, 1.0 s of the 4.8 s of a gpt2 build's stages, 0.4 s more while its
stage modules were imported. So:

- a stage's module is imported with the collector paused (`paused`): what an import makes lives
  as long as the module;
- a stage runs with every older object frozen (`stage_scope`): its passes walk what it made, and
  what it leaves is unfrozen when it ends;
- the older objects get CPython's own rule at recipe boundaries: the first stage of another
  recipe, or a stage of this one that ran before (a second build in the same process), starts
  with a full pass when the process's allocated blocks grew by a quarter since the last one (a
  graph holds its weights in reference cycles; frozen, they would stay until the process ends).
  A process that builds many recipes (the test suite, a worker) pays a pass per recipe only
  while it grows.

A scope whose collector was already frozen (another stage on another thread, or the caller's own
`gc.freeze`) leaves it as it is.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

GROWTH = 1.25
"""A boundary's full pass runs when the allocated blocks reach this multiple of the last pass's."""

_lock = threading.Lock()
_ran: set[tuple[str, str]] = set()  # (recipe, stage) since the last boundary, all of one recipe
_blocks_after_pass = 0  # sys.getallocatedblocks() after the last boundary pass


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside (an import); the collector's state as it was after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def stage_scope(recipe: str, stage: str) -> Iterator[None]:
    """Run `stage` of `recipe` (its build folder) with older objects out of the collector's passes."""
    global _blocks_after_pass
    with _lock:
        owner = gc.get_freeze_count() == 0
        if owner:
            if (recipe, stage) in _ran or any(r != recipe for r, _ in _ran):
                _ran.clear()
                if sys.getallocatedblocks() >= GROWTH * _blocks_after_pass:
                    gc.collect()  # the cycles of what ran before, before they are frozen with the rest
                    _blocks_after_pass = sys.getallocatedblocks()
            _ran.add((recipe, stage))
            gc.freeze()
    try:
        yield
    finally:
        if owner:
            gc.unfreeze()
