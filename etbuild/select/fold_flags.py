"""Constant folding of feature flags in Python source, before tree shaking.

`fold_constants(tree, module, is_package, constants)` gives values to top-level names of
some modules. Every read of one, `alias.NAME` on a module alias or a bare name from
`from module import NAME`, becomes its value. Then `if`, `elif`, `while`, `x if c else y`,
`not` and `and`/`or` fold where the constants decide them, bottom-up, and what follows a
`return`, `raise`, `break` or `continue` goes, so the code behind an off flag does not ship
(the shaker then drops what only it used). Code holding a `yield`, `global` or `nonlocal`
stays even when it cannot run (its function would change). Names of such a module that
have no value given stay ordinary reads. Assigning or deleting a constant is an
`InternalError`; a flag alias that a local name shadows is not folded.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from etbuild.errors import InternalError
from etbuild.select.astscope import SCOPES, alias_paths, bound_names, nonempty, scope_locals

Value = bool | int | str | None
Constants = Mapping[str, Mapping[str, Value]]


def fold_constants(tree: ast.Module, module: str, is_package: bool, constants: Constants) -> ast.Module:
    """The module with its reads of `constants` replaced by their values and what they decide folded."""
    flags = {f"{m}.{name}": value for m, names in constants.items() for name, value in names.items()}

    def reads_flags(paths: Mapping[str, str]) -> bool:
        return any(f == p or f.startswith(f"{p}.") for f in flags for p in paths.values())

    imported = _imported_paths(tree, module, is_package)
    if not reads_flags(imported):
        return tree  # imports no flag's module: left as written (without walking the whole tree)
    paths = _unshadowed(tree, imported)
    if not reads_flags(paths):
        return tree  # reads no flag: left as written
    folded = _Fold(module, paths, flags).visit(tree)
    assert isinstance(folded, ast.Module)
    return folded


def _imported_paths(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Top-level import aliases -> the dotted path each is bound to, for those bound to one path only."""
    paths: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias, path in alias_paths(node, module, is_package):
                paths.setdefault(alias, set()).add(path)
    return {alias: next(iter(path)) for alias, path in paths.items() if len(path) == 1}


def _unshadowed(tree: ast.Module, paths: Mapping[str, str]) -> dict[str, str]:
    """The aliases of `paths` that nothing else rebinds (no other top-level binding, no `global`)."""
    other = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            other |= bound_names(node)
    return {alias: path for alias, path in paths.items() if alias not in other}


class _Fold(ast.NodeTransformer):
    """Replaces reads of flags by constants, then folds bottom-up what the constants decide.

    A flag is read as `alias.NAME` (alias bound to its module, or a chain `pkg.mod.NAME`) or as
    a bare alias of `from mod import NAME`. Scopes are handled conservatively: a name bound in
    any enclosing function, class or comprehension is never taken for the module's alias.
    """

    def __init__(self, module: str, paths: Mapping[str, str], flags: Mapping[str, Value]) -> None:
        self.module = module
        self.paths = paths
        self.flags = flags
        self.scopes: list[set[str]] = []

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list):
                setattr(node, name, _reachable(stmts))
        return nonempty(node)

    # --- flag reads

    def _flag(self, node: ast.expr) -> str | None:
        """The flag an `alias.NAME` / `NAME` expression reads, if any."""
        attrs: list[str] = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.paths or any(node.id in s for s in self.scopes):
            return None
        path = ".".join([self.paths[node.id], *reversed(attrs)])
        return path if path in self.flags else None

    def _read(self, node: ast.Name | ast.Attribute) -> ast.AST:
        path = self._flag(node)
        if path is None:
            return self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            raise InternalError(
                f"{self.module}, line {node.lineno}: `{ast.unparse(node)}` is assigned or deleted, but "
                f"{path} is a constant (folded into the code that reads it)"
            )
        return ast.copy_location(ast.Constant(self.flags[path]), node)

    visit_Name = visit_Attribute = _read

    def _scope(self, node: ast.AST, names: set[str]) -> ast.AST:
        self.scopes.append(names)
        self.generic_visit(node)
        self.scopes.pop()
        return node

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> ast.AST:
        return self._scope(node, scope_locals(node))

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return self._scope(node, set().union(*(bound_names(s) for s in node.body)))

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> ast.AST:
        return self._scope(node, {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)})

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    # --- folding

    def visit_If(self, node: ast.If) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        node.test = _truth(node.test)
        if not isinstance(node.test, ast.Constant):
            return node
        taken, dropped = (node.body, node.orelse) if node.test.value else (node.orelse, node.body)
        return _spliced(taken) if _droppable(dropped) else node

    def visit_While(self, node: ast.While) -> ast.AST | list[ast.stmt]:
        """`while False:` runs only its `else`; `while True:` stays."""
        self.generic_visit(node)
        node.test = _truth(node.test)
        if isinstance(node.test, ast.Constant) and not node.test.value and _droppable(node.body):
            return _spliced(node.orelse)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        node.test = _truth(node.test)
        if not isinstance(node.test, ast.Constant):
            return node
        taken, dropped = (node.body, node.orelse) if node.test.value else (node.orelse, node.body)
        return taken if _droppable([dropped]) else node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        node.operand = _truth(node.operand)
        if not isinstance(node.operand, ast.Constant):
            return node
        return ast.copy_location(ast.Constant(not node.operand.value), node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        return _boolop(node, truth=False)

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        self.generic_visit(node)
        node.test = _truth(node.test)
        return node


def _boolop(node: ast.BoolOp, truth: bool) -> ast.expr:
    """`and`/`or` without the constant operands that cannot change its value (or, with truth, its truth).

    Python returns the first operand that decides (falsy for `and`, truthy for `or`), else the
    last: a deciding constant ends the expression, a neutral one that is not last goes. A trailing
    neutral constant changes only the value, not the truth: `x and True` is `x` only in a test.
    """
    decides = isinstance(node.op, ast.Or)
    values: list[ast.expr] = []
    for i, v in enumerate(node.values):
        if _constant_truth(v) is decides:
            values.append(v)
            break
        if _constant_truth(v) is None or i == len(node.values) - 1:
            values.append(v)
    if truth and len(values) > 1 and _constant_truth(values[-1]) is (not decides):
        values.pop()
    if not _droppable(node.values[node.values.index(values[-1]) + 1 :]):
        return node
    node.values = values
    return values[0] if len(values) == 1 else node


def _constant_truth(node: ast.expr) -> bool | None:
    """The truth of a constant; None for any other expression."""
    return bool(node.value) if isinstance(node, ast.Constant) else None


def _truth(node: ast.expr) -> ast.expr:
    """node where only its truth is used (a test): `and`/`or` also lose trailing neutral constants."""
    if not isinstance(node, ast.BoolOp):
        return node
    node.values = [_truth(v) for v in node.values]  # an operand's value is the result only through its truth
    return _boolop(node, truth=True)


def _droppable(nodes: list[ast.stmt] | list[ast.expr]) -> bool:
    """Whether removing code that never runs leaves its scope as it was.

    Not so with a `yield` (the function would stop being a generator) or a `global` /
    `nonlocal` (they hold for the whole function, wherever they stand).
    """
    stack: list[ast.AST] = list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
            return False
        if not isinstance(n, SCOPES):
            stack.extend(ast.iter_child_nodes(n))
    return True


def _reachable(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """The statements up to the first `return`, `raise`, `break` or `continue` (what follows never runs)."""
    for i, s in enumerate(stmts):
        if isinstance(s, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
            return stmts[: i + 1] if _droppable(stmts[i + 1 :]) else stmts
    return stmts


def _spliced(body: list[ast.stmt]) -> list[ast.stmt]:
    """A taken branch's statements for its enclosing block (a `pass` there would be noise)."""
    return [s for s in body if not isinstance(s, ast.Pass)]
