"""What a set of programs needs from a runtime: operators (with every call), dtypes, backends.

A `Selection` is a value: frozen, ordered (operators by name, calls in program order), and
mergeable with `union`. It round-trips through JSON (`to_dict` / `from_dict`) so a build
stage can write it once and later stages read it back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from etbuild.lowering.locations import SourceLocation


@dataclass(frozen=True)
class CallSite:
    """One call of an operator: where it is in which program, and what it was called with.

    dtypes: numpy dtype names of its tensor arguments in argument order, list elements
    flattened (absent optional tensors left out), the result slot included.
    kernel_key: ExecuTorch's kernel key for the call (`v1/6;0,1|6;0,1|…`).
    """

    program: str
    method: str
    instruction: int
    dtypes: tuple[str, ...]
    kernel_key: str
    sources: tuple[SourceLocation, ...] = ()


@dataclass(frozen=True)
class OperatorUse:
    """Every call of one operator (canonical name `aten::add.out`) across the programs."""

    name: str
    calls: tuple[CallSite, ...]

    @property
    def count(self) -> int:
        return len(self.calls)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Every dtype any call passes, sorted."""
        return tuple(sorted({d for c in self.calls for d in c.dtypes}))

    @property
    def signatures(self) -> tuple[tuple[str, ...], ...]:
        """The distinct per-call dtype tuples, sorted."""
        return tuple(sorted({c.dtypes for c in self.calls}))

    @property
    def kernel_keys(self) -> tuple[str, ...]:
        return tuple(sorted({c.kernel_key for c in self.calls}))

    @property
    def programs(self) -> tuple[str, ...]:
        return tuple(sorted({c.program for c in self.calls}))

    @property
    def sources(self) -> tuple[SourceLocation, ...]:
        """Distinct source locations, in the order the calls first reach them."""
        return tuple(dict.fromkeys(s for c in self.calls for s in c.sources))


@dataclass(frozen=True)
class Selection:
    """The operators, backends and runtime features some programs use; `union` merges selections."""

    operators: tuple[OperatorUse, ...] = ()
    backends: tuple[str, ...] = ()
    programs: tuple[str, ...] = ()
    features: tuple[str, ...] = ()  # names in etbuild.runtime.features, sorted
    scalar_types: tuple[int, ...] = ()  # ScalarType codes of every tensor value, sorted

    @property
    def names(self) -> tuple[str, ...]:
        """The operator names, sorted."""
        return tuple(op.name for op in self.operators)

    def operator(self, name: str) -> OperatorUse:
        """The use of operator `name`; KeyError when no program calls it."""
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    def union(self, others: Iterable[Selection]) -> Selection:
        """This selection merged with others; a call seen in several is counted once."""
        return merge([self, *others])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (see `from_dict`)."""
        return {
            "programs": list(self.programs),
            "backends": list(self.backends),
            "features": list(self.features),
            "scalar_types": list(self.scalar_types),
            "operators": {op.name: [_call_to_dict(c) for c in op.calls] for op in self.operators},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selection:
        ops = {name: [_call_from_dict(c) for c in calls] for name, calls in data["operators"].items()}
        return build(
            ops, data.get("backends", ()), data.get("programs", ()), data.get("features", ()),
            data.get("scalar_types", ()),
        )


def build(
    calls: Mapping[str, Iterable[CallSite]],
    backends: Iterable[str],
    programs: Iterable[str],
    features: Iterable[str] = (),
    scalar_types: Iterable[int] = (),
) -> Selection:
    """A Selection from calls by operator name (operators sorted, duplicate calls dropped)."""
    operators = tuple(
        OperatorUse(name, tuple(dict.fromkeys(calls[name]))) for name in sorted(calls) if calls[name]
    )
    return Selection(
        operators, tuple(sorted(set(backends))), tuple(dict.fromkeys(programs)), tuple(sorted(set(features))),
        tuple(sorted(set(scalar_types))),
    )


def merge(selections: Iterable[Selection]) -> Selection:
    """The union of several selections."""
    calls: dict[str, list[CallSite]] = {}
    backends: list[str] = []
    programs: list[str] = []
    features: list[str] = []
    scalar_types: list[int] = []
    for sel in selections:
        for op in sel.operators:
            calls.setdefault(op.name, []).extend(op.calls)
        backends.extend(sel.backends)
        programs.extend(sel.programs)
        features.extend(sel.features)
        scalar_types.extend(sel.scalar_types)
    return build(calls, backends, programs, features, scalar_types)


def _call_to_dict(call: CallSite) -> dict[str, Any]:
    return {
        "program": call.program,
        "method": call.method,
        "instruction": call.instruction,
        "dtypes": list(call.dtypes),
        "kernel_key": call.kernel_key,
        "sources": [[s.filename, s.lineno, s.module, s.code] for s in call.sources],
    }


def _call_from_dict(data: Mapping[str, Any]) -> CallSite:
    return CallSite(
        data["program"],
        data["method"],
        int(data["instruction"]),
        tuple(data["dtypes"]),
        data["kernel_key"],
        tuple(SourceLocation(f, int(n), m, c) for f, n, m, c in data.get("sources", ())),
    )
