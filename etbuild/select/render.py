"""Tree shaking, last half: a module's kept statements written back as source.

`render` unparses the kept statements without comments, docstrings or signature annotations;
`from __future__ import annotations` goes, and the annotations it made lazy are written as the
strings it made of them (see `_Strip`). `override` replaces top-level definitions by name.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Mapping
from typing import Any

from etbuild.errors import InternalError
from etbuild.select.astscope import nonempty
from etbuild.select.statements import is_string_statement


def override(tree: ast.Module, overrides: Mapping[str, str]) -> ast.Module:
    """The module with each top-level def, class or `NAME = …` named in `overrides` replaced by the given source."""
    for name, replacement in overrides.items():
        idx = [i for i, s in enumerate(tree.body) if _defines(s) == name]
        if len(idx) != 1:
            raise InternalError(f"cannot override {name}: the module defines it {len(idx)} times")
        tree.body[idx[0] : idx[0] + 1] = ast.parse(replacement).body
    return tree


def _defines(node: ast.stmt) -> str | None:
    """The one name a def, class or single-target assignment binds (None for other statements)."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return node.name
    target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
    if isinstance(node, ast.AnnAssign):
        target = node.target
    return target.id if isinstance(target, ast.Name) else None


# ---------------------------------------------------------------------------- output


_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)
"""The nodes that are, or hold, statements."""


class _Strip(ast.NodeTransformer):
    """Removes string statements, function signature annotations and unevaluated variable annotations.

    With `lazy` (the module imported `from __future__ import annotations`) that import goes too,
    and the annotations Python still evaluates without it (class-level ones, module-level `x: T`)
    become the strings it made of them, so nothing evaluates an annotation that did not before:
    forward references and names bound only under `if TYPE_CHECKING:` keep working.

    It descends through statements only: everything it changes is a statement or a statement's
    own field, and no expression holds a statement (an expression's nodes were half of the visits).
    """

    def __init__(self, lazy: bool) -> None:
        self.lazy = lazy
        self.in_class = False

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and any(isinstance(v, _HOLDS_STATEMENTS) for v in value):
                value[:] = [new for item in value for new in self._visited(item)]
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list):
                setattr(node, name, [s for s in stmts if not is_string_statement(s)])
        return nonempty(node)

    def _visited(self, node: Any) -> list[Any]:
        """What a statement list holds in place of `node` (a statement visited; other nodes as they are)."""
        if not isinstance(node, _HOLDS_STATEMENTS):
            return [node]
        result = self.visit(node)
        return [] if result is None else result if isinstance(result, list) else [result]

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        outer, self.in_class = self.in_class, False
        self.generic_visit(node)
        self.in_class = outer
        args = node.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                a.annotation = None
        node.returns = None
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        outer, self.in_class = self.in_class, True
        self.generic_visit(node)
        self.in_class = outer
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        """`x: T = v` -> `x = v` outside class bodies (class-level annotations stay: dataclasses read them)."""
        if node.value is not None and not self.in_class:
            return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)
        if self.lazy:
            node.annotation = ast.copy_location(ast.Constant(ast.unparse(node.annotation)), node.annotation)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        """Drops `annotations` from `from __future__ import …`; other features stay.

        Safe on every Python the project supports (requires-python >= 3.10): the import changes
        only annotations; signature ones are stripped, local ones are never evaluated, and the
        class- and module-level ones left are the strings it made. Evaluating those instead would
        do for `X | None` on 3.10, not for forward references or names imported only under
        `if TYPE_CHECKING:` (a block the shaker drops).
        """
        if node.module == "__future__":
            node.names = [a for a in node.names if a.name != "annotations"]
        return node if node.names else None


def _lazy_annotations(statements: list[ast.stmt]) -> bool:
    return any(
        isinstance(s, ast.ImportFrom) and s.module == "__future__" and any(a.name == "annotations" for a in s.names)
        for s in statements
    )


def render(statements: list[ast.stmt], *, in_place: bool = False) -> str:
    """Source text of the statements, without string statements, comments or signature annotations.

    `in_place`: strip the given statements themselves instead of a deep copy of them (for a caller
    that owns them and reads them no more, such as `codegen.runtime_sources`: copying the trees of
    a whole runtime was half of the select stage's time).
    """
    body = statements if in_place else copy.deepcopy(statements)
    tree = _Strip(_lazy_annotations(statements)).visit(ast.Module(body=body, type_ignores=[]))
    text = ast.unparse(ast.fix_missing_locations(tree))
    return text + "\n" if text else ""
