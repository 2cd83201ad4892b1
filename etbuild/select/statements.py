"""Tree shaking, first half: what each top-level statement of a module is, binds and uses.

`analyze` classifies every top-level statement (docstring, future, import, definition,
registration, effect, delete, skip; see etbuild.select.shake) and records the global names
it binds and reads, and the modules it imports; `Shaker` decides from these what ships.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from etbuild.select.astscope import alias_paths, bound_names, scope_locals

REGISTRY = "etbuild.runtime.kernel_registry"
REGISTER_FN = "kernel"


@dataclass(frozen=True)
class ModuleRef:
    """An import alias bound to a module."""

    module: str


@dataclass(frozen=True)
class NameRef:
    """An import alias bound to a top-level name of a module."""

    module: str
    name: str


Ref = ModuleRef | NameRef


@dataclass
class Statement:
    """One top-level statement and what it binds, reads and registers."""

    node: ast.stmt
    kind: str
    defines: frozenset[str] = frozenset()
    uses: frozenset[str] = frozenset()
    attrs: frozenset[tuple[str, str]] = frozenset()
    local_imports: tuple[Ref, ...] = ()
    registers: tuple[str, ...] = ()  # literal kernel names it registers
    dynamic: bool = False  # registers kernels whose names are not literals
    candidates: frozenset[str] = frozenset()  # for dynamic ones: the `ns::op` strings in reach
    loads: tuple[str, ...] = ()  # modules an `import a.b.c` statement loads
    refs: Mapping[str, Ref] = field(default_factory=dict)  # what an import statement's aliases are

    @property
    def names_read(self) -> set[str]:
        """Every global name read: bare, or as the base of `name.attr`."""
        return set(self.uses) | {base for base, _ in self.attrs}


@dataclass
class Module:
    """A parsed module: its statements and where each top-level name is bound."""

    name: str
    is_package: bool
    statements: list[Statement]
    aliases: dict[str, Ref] = field(default_factory=dict)  # import alias -> what it is bound to
    bindings: dict[str, list[int]] = field(default_factory=dict)
    text: str | None = None  # a generated module's verbatim source

    @property
    def path(self) -> str:
        """Its path in a package tree: `etbuild/runtime/program.py`."""
        base = self.name.replace(".", "/")
        return f"{base}/__init__.py" if self.is_package else f"{base}.py"


# ---------------------------------------------------------------------------- analysis


ModuleExists = Callable[[str], bool]


def analyze(name: str, tree: ast.Module, is_package: bool, exists: ModuleExists, text: str | None = None) -> Module:
    """Classify a parsed module's top-level statements; `exists` says if a name is a module."""
    future = any(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in tree.body)
    module = Module(name, is_package, [], text=text)
    for i, node in enumerate(tree.body):
        kind = _kind(node, i == 0)
        refs = _import_refs(node, name, is_package, exists) if kind == "import" else {}
        module.aliases.update(refs)
        module.statements.append(_statement(node, kind, future, refs, exists))
    registry_kernel = module.aliases.get(REGISTER_FN) == NameRef(REGISTRY, REGISTER_FN)
    for i, st in enumerate(module.statements):
        if registry_kernel and st.kind in ("definition", "effect"):
            _mark_registration(st)
        if st.kind != "delete":
            for bound in st.defines:
                module.bindings.setdefault(bound, []).append(i)
    _find_candidates(module)
    return module


def _statement(node: ast.stmt, kind: str, future: bool, refs: Mapping[str, Ref], exists: ModuleExists) -> Statement:
    if kind in ("docstring", "skip", "future"):
        return Statement(node, kind)
    if kind == "import":
        loads = tuple(a.name for a in node.names) if isinstance(node, ast.Import) else ()
        return Statement(node, kind, defines=frozenset(refs), loads=loads, refs=dict(refs))
    uses = _Uses(future, exists)
    uses.visit(node)
    # A loop's targets are bound before its body reads them: not reads of other bindings.
    own = bound_names(node.target) if isinstance(node, (ast.For, ast.AsyncFor)) else set()
    return Statement(
        node, kind, frozenset(bound_names(node)), frozenset(uses.names - own),
        frozenset((b, a) for b, a in uses.attrs if b not in own), tuple(uses.imports),
    )


def _kind(node: ast.stmt, first: bool) -> str:
    if first and is_string_statement(node):
        return "docstring"
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return "future"
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return "import"
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        return "skip"
    if isinstance(node, ast.Delete):
        return "delete"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return "definition"
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and all(
        isinstance(t, (ast.Name, ast.Tuple, ast.List)) for t in _targets(node)
    ):
        return "definition"
    return "effect"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]


def _import_refs(
    node: ast.stmt, module: str, is_package: bool, exists: ModuleExists
) -> dict[str, Ref]:
    assert isinstance(node, (ast.Import, ast.ImportFrom))
    refs: dict[str, Ref] = {}
    for alias, path in alias_paths(node, module, is_package):
        if isinstance(node, ast.Import) or exists(path):
            refs[alias] = ModuleRef(path)
        else:
            base, name = path.rsplit(".", 1)
            refs[alias] = NameRef(base, name)
    return refs


class _Uses(ast.NodeVisitor):
    """Global names read bare, `name.attr` reads, and imports made inside functions.

    Names local to an enclosing function or comprehension are not global reads.
    """

    def __init__(self, future_annotations: bool, exists: ModuleExists) -> None:
        self.future = future_annotations
        self.exists = exists
        self.names: set[str] = set()  # read other than as `name.attr`
        self.attrs: set[tuple[str, str]] = set()
        self.imports: list[Ref] = []
        self.scopes: list[set[str]] = []
        self.in_class = 0

    def _local(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and not self._local(node.id):
            self.names.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        if isinstance(base, ast.Name) and isinstance(base.ctx, ast.Load):
            if not self._local(base.id):
                self.attrs.add((base.id, node.attr))
        else:
            self.visit(base)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        for d in [*node.args.defaults, *node.args.kw_defaults]:
            if d is not None:
                self.visit(d)
        self.scopes.append(scope_locals(node))
        outer_class, self.in_class = self.in_class, 0
        for s in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(s)
        self.in_class = outer_class
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        targets = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.visit(node.generators[0].iter)  # evaluated in the enclosing scope
        self.scopes.append(targets)
        for i, g in enumerate(node.generators):
            if i:
                self.visit(g.iter)
            for cond in g.ifs:
                self.visit(cond)
        for part in ("elt", "key", "value"):
            if getattr(node, part, None) is not None:
                self.visit(getattr(node, part))
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        # Evaluated: class-level annotations (dataclasses read them), module-level ones
        # without `from __future__ import annotations`; never those of local variables.
        if not self.scopes and (self.in_class or not self.future):
            self.visit(node.annotation)
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for n in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(n)
        self.in_class += 1
        for s in node.body:
            self.visit(s)
        self.in_class -= 1

    def visit_Import(self, node: ast.Import) -> None:
        self.imports.extend(ModuleRef(a.name) for a in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        for a in node.names:
            sub = f"{base}.{a.name}"
            self.imports.append(ModuleRef(sub) if self.exists(sub) else NameRef(base, a.name))


def _mark_registration(st: Statement) -> None:
    """Classify a statement that calls `kernel(…)` outside function bodies."""
    names, dynamic, found = [], False, False
    for call in _top_level_calls(st.node):
        if isinstance(call.func, ast.Name) and call.func.id == REGISTER_FN:
            found = True
            first = call.args[0] if call.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.append(first.value)
            else:
                dynamic = True
    if found:
        st.kind, st.registers, st.dynamic = "registration", tuple(names), dynamic


def _top_level_calls(node: ast.AST) -> Iterator[ast.Call]:
    """Calls executed when the statement runs (not those inside function bodies)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for d in node.decorator_list:
            yield from _top_level_calls(d)
        return
    if isinstance(node, ast.Lambda):
        return
    if isinstance(node, ast.Call):
        yield node
    for child in ast.iter_child_nodes(node):
        yield from _top_level_calls(child)


def _find_candidates(module: Module) -> None:
    """For dynamic registrations: the `ns::op` strings in the statement and the tables it reads."""
    for st in module.statements:
        if not st.dynamic:
            continue
        nodes: list[ast.AST] = [st.node]
        for name in st.names_read:
            for i in module.bindings.get(name, []):
                if module.statements[i].kind == "definition" and not isinstance(
                    module.statements[i].node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                ):
                    nodes.append(module.statements[i].node)
        st.candidates = frozenset(
            c.value for n in nodes for c in ast.walk(n)
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and "::" in c.value
        )


# ---------------------------------------------------------------------------- shaking


SourceLookup = Callable[[str], "tuple[str, bool] | None"]


def is_string_statement(node: ast.stmt) -> bool:
    """A statement that is only a string literal: a docstring, anywhere; it does nothing."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
