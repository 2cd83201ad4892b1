"""The XNNPACK backend's runtime half (torch-free, numpy only): executes `XnnpackBackend` delegate blobs.

`BACKEND` is what etbuild's backend registry (etbuild.runtime.backend_registry) loads for the id
`XnnpackBackend`. The pieces, in the order init runs them: values.py (check values, decode
constants), ops/ (one Op per node, weights packed), compile.py (order, externals, views),
delegate.py (shapes, arena from memory.py, bound steps; boundary.py converts externals).
"""

from etbuild.backends.xnnpack.runtime.backend import XnnpackBackend

BACKEND = XnnpackBackend()

__all__ = ["BACKEND", "XnnpackBackend"]
