"""The Ethos-U backend's AOT half (imports torch): partition per target, lower to TOSA, compile with Vela.

limits.py (what each target cannot run), preprocess.py (TOSA → Vela → blob), vela.py (the compiler),
The TOSA walk itself is the
TOSA backend's (etbuild.backends.tosa.aot). `BACKEND` is what the partition step loads for `ethos-u`.
"""

from __future__ import annotations

from typing import Any

from etbuild.backends.aot import Processed, Proposal, Subgraph
from etbuild.backends.ethos_u.aot.limits import check_for
from etbuild.backends.ethos_u.aot.preprocess import preprocess
from etbuild.backends.ethos_u.options import EthosUOptions
from etbuild.backends.tosa.aot.lower import RULES
from etbuild.backends.tosa.aot.partitioner import propose
from etbuild.graphs.method import GraphMethod


class EthosUAot:
    """The AOT half of the Ethos-U backend (backend id `EthosUBackend`)."""

    id = "EthosUBackend"

    def partition(self, method: GraphMethod, options: EthosUOptions) -> Proposal:
        return propose(method, check_for(options.target))

    def preprocess(self, sub: Subgraph, options: EthosUOptions) -> Processed:
        return preprocess(sub, options)

    def operators(self) -> frozenset[Any]:
        return frozenset(RULES)


BACKEND = EthosUAot()

__all__ = ["BACKEND", "EthosUAot"]
