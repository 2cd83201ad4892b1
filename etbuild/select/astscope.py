"""Names and scopes in Python source, for the tree-shaker and the constant folder.

Which names a statement binds, which are local to a function, what an import alias is
bound to, and the `pass` a statement list needs when folding has emptied it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from etbuild.errors import InternalError


def alias_paths(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """(alias, the dotted path it is bound to) for each alias an import statement binds.

    `import a.b.c` binds `a` to `a`; `from a.b import c` binds `c` to `a.b.c`, module or not.
    """
    if isinstance(node, ast.Import):
        for a in node.names:
            yield (a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0])
        return
    base = absolute_module(node, module, is_package)
    for a in node.names:
        if a.name == "*":
            raise InternalError(f"{module}: `from {base} import *` cannot be tree-shaken")
        yield a.asname or a.name, f"{base}.{a.name}"


def absolute_module(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def bound_names(node: ast.AST) -> set[str]:
    """The names a top-level statement binds in module scope."""
    names: set[str] = set()
    stack: list[ast.AST] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
            continue
        if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in n.names)
        stack.extend(ast.iter_child_nodes(n))
    return names


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def scope_locals(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names local to a function: its parameters and what its body binds (not `global`)."""
    a = node.args
    names = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None}
    declared_global: set[str] = set()
    stack: list[ast.AST] = list(node.body) if isinstance(node.body, list) else [node.body]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Global):
            declared_global.update(n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update(x.asname or x.name.split(".")[0] for x in n.names)
        if not isinstance(n, SCOPES):
            stack.extend(ast.iter_child_nodes(n))
    return names - declared_global


def nonempty(node: ast.AST) -> ast.AST:
    """node with `pass` in each statement list it needs that has become empty."""
    needed = {
        "body": isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case)),
        "finalbody": getattr(node, "handlers", None) == [],  # a `try` needs handlers or a `finally`
    }
    for name, required in needed.items():
        if required and getattr(node, name, None) == []:
            setattr(node, name, [ast.Pass()])
    return node
