"""`XnnpackBackend` in etbuild's runtime: initialise a delegate blob once, execute it per call."""

from __future__ import annotations

from collections.abc import Mapping

from etbuild.backends.xnnpack.format.blob import read_blob
from etbuild.backends.xnnpack.runtime.compile import compile_graph
from etbuild.backends.xnnpack.runtime.delegate import XnnpackDelegate
from etbuild.backends.xnnpack.runtime.values import ConstantSource, read_values


class XnnpackBackend:
    """The runtime half of the XNNPACK backend (backend id `XnnpackBackend`)."""

    id = "XnnpackBackend"

    def init(self, blob: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
             ) -> XnnpackDelegate:
        """Decode and check the blob, resolve its constants, pre-pack, plan and bind; InvalidProgram if malformed.

        compile_specs are accepted and unused: ExecuTorch's XNNPACK lowering writes none that
        change the computation.
        """
        decoded = read_blob(blob)
        values = read_values(decoded.graph, ConstantSource(decoded.graph, decoded.constants, named_data))
        return XnnpackDelegate(compile_graph(decoded.graph, values))
