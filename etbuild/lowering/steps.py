"""Named pipelines of named steps, run top to bottom, with errors that say where they happened.

A `Step` has a name, a one-line description, the dialect it takes and the one it gives, and
a function from form to form. A `Pipeline` refuses duplicate names and steps that do not
chain. An error raised inside a step is re-raised naming the pipeline, the step, the steps
before it and, when the step recorded them with `in_method` / `at_node`, the method and
the graph node with its module path and source line (as torch.fx's pass manager does):

    lower step 'to-program' (after decompose, fold-constants, fuse-batch-norm): operator … has no out-variant
      in method 'forward', node twice (etbuild_test.twice.default)
      from <root> (Twice) at model.py:7: return twice(x)

An etbuild error keeps its class (and exit code) and gets that text as its message; any
other exception is a bug and keeps its traceback, with the text added as a note.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from torch._ops import OpOverload
from torch.fx import Node

from etbuild.errors import EtbuildError, InternalError, UsageError, did_you_mean
from etbuild.lowering.forms import Dialect, GraphMethod, GraphProgram
from etbuild.lowering.sources import node_location

ALL = "all"
_WHERE = "_etbuild_where"  # attribute of an exception: {"method": name, "node": Node}


@dataclass(frozen=True)
class Step:
    """One named step of a pipeline: `run` takes a form of dialect `takes`, gives one of `gives`."""

    name: str
    doc: str
    takes: Dialect
    gives: Dialect
    run: Callable[[Any], Any]


@dataclass(frozen=True)
class Pipeline:
    """Steps run in order; `run` calls `after(step, form)` once each step has finished."""

    name: str
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        names = [s.name for s in self.steps]
        for before, step in zip(self.steps, self.steps[1:]):
            if before.gives != step.takes:
                raise InternalError(f"{self.name} step {step.name!r} takes {step.takes.name}, but the step "
                                    f"before it, {before.name!r}, gives {before.gives.name}")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise InternalError(f"{self.name} pipeline names more than one step {', '.join(map(repr, duplicates))}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.steps)

    def select(self, requested: Iterable[str]) -> tuple[str, ...]:
        """The step names asked for (`all` is every step), in pipeline order; an unknown name is a UsageError."""
        wanted = set(requested)
        unknown = sorted(wanted - {ALL, *self.names})
        if unknown:
            name = unknown[0]
            raise UsageError(f"unknown {self.name} step {name!r}{did_you_mean(name, list(self.names))}; "
                             f"the steps are: {', '.join(self.names)} (or '{ALL}')")
        return self.names if ALL in wanted else tuple(n for n in self.names if n in wanted)

    def dump_name(self, step_name: str) -> str:
        """`02-fold-constants.py`: the step's position (from 1), its name and its dialect's suffix."""
        i = self.names.index(step_name)
        return f"{i + 1:02d}-{step_name}{self.steps[i].gives.suffix}"

    def run(self, form: Any, after: Callable[[Step, Any], None] | None = None) -> Any:
        for i, step in enumerate(self.steps):
            try:
                form = step.run(form)
            except Exception as exc:
                _locate(exc, f"{self.name} step {step.name!r}", [s.name for s in self.steps[:i]])
                raise
            if after is not None:
                after(step, form)
        return form


def each_method(fn: Callable[[GraphMethod], GraphMethod]) -> Callable[[GraphProgram], GraphProgram]:
    """A step over a whole program from a function over one method."""

    def run(program: GraphProgram) -> GraphProgram:
        methods = []
        for method in program.methods:
            with in_method(method.name):
                methods.append(fn(method))
        return replace(program, methods=tuple(methods))

    run.__name__ = fn.__name__
    return run


@contextmanager
def in_method(name: str) -> Iterator[None]:
    """Errors raised inside name method `name`."""
    try:
        yield
    except Exception as exc:
        _where(exc).setdefault("method", name)
        raise


@contextmanager
def at_node(node: Node) -> Iterator[None]:
    """Errors raised inside name `node` and where it came from (the innermost node wins)."""
    try:
        yield
    except Exception as exc:
        _where(exc).setdefault("node", node)
        raise


def _where(exc: Exception) -> dict[str, Any]:
    if not hasattr(exc, _WHERE):
        setattr(exc, _WHERE, {})
    where: dict[str, Any] = getattr(exc, _WHERE)
    return where


def _locate(exc: Exception, step: str, before: list[str]) -> None:
    """Name the step, the steps before it, the method and the node in the exception."""
    head = f"{step} (after {', '.join(before)})" if before else f"{step} (the first step)"
    detail = _place(getattr(exc, _WHERE, {}))
    if isinstance(exc, EtbuildError):
        exc.args = ("\n".join([f"{head}: {exc}", *detail]),)
    else:
        exc.add_note("\n".join([f"raised in {head}", *detail]))


def _place(where: dict[str, Any]) -> list[str]:
    """`  in method 'forward', node conv (aten.convolution.default)` and `  from <source>` lines."""
    node: Node | None = where.get("node")
    place = [f"method {where['method']!r}"] if "method" in where else []
    if node is not None:
        place.append(f"node {node.name} ({_target(node)})")
    lines = [f"  in {', '.join(place)}"] if place else []
    source = node_location(node) if node is not None else ""
    return [*lines, f"  from {source}"] if source else lines


def _target(node: Node) -> str:
    target = node.target
    if isinstance(target, (str, OpOverload)):
        return str(target)
    return getattr(target, "__name__", None) or str(target)
