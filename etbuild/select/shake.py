"""Tree shaking of Python modules: keep only the top-level statements that roots need.

A small linker over `ast`. Each top-level statement is classified:

    docstring    dropped
    future       `from __future__ import …`: kept in every shipped module
    import       kept with only the aliases that kept code uses
    definition   def / class / `NAME = …`: kept when kept code uses a name it binds
    registration a statement calling the registry's `kernel(…)` outside function bodies:
                 kept when it registers a selected kernel (see `Shaker._registration_root`)
    effect       anything else (loops, calls, `if __name__ …`): kept when its module ships
    delete       `del NAME`: kept when every name it deletes is bound by kept code
    skip         `if TYPE_CHECKING:` blocks: dropped (annotations are dropped too)

Constants (feature flags, `Shaker(constants=…)`) are folded into each module before it is
classified (see `etbuild.select.fold`), so the code behind an off flag, and what only it
used, does not ship.

Uses are the global names a statement reads anywhere inside it, function bodies included
(names local to a function or comprehension are not global reads); `alias.attr` on a module
alias needs only that module's `attr`. Function signature annotations are removed from the
output and are not uses; class-level annotations are uses (dataclasses read them). Output is
`ast.unparse` of the kept statements without comments or string statements (docstrings,
wherever they are); `from __future__ import annotations` goes, the annotations it made lazy
written as the strings it made of them (see `_Strip`).

Conservative where it cannot see: a dynamic registration whose names it cannot find is
kept, a bare use of a module alias ships that whole module, a flag alias that a local name
shadows is not folded. `Shaker.uncovered` reports selected kernels no kept registration
accounts for.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from etbuild.errors import InternalError
from etbuild.select.astscope import alias_paths, bound_names, nonempty, scope_locals
from etbuild.select.fold import Constants, fold_constants

REGISTRY = "etbuild.kernels.registry"
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
    if first and _is_string(node):
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


class Shaker:
    """Computes the statements to keep, module by module, from roots.

    source: module name -> (source text, is_package), or None for modules outside the tree
    (the standard library, numpy); `allowed` says which first-party modules may ship.
    selected: kernel names to keep registrations for, by the module that registers them.
    constants: module -> {top-level name: value}: feature flags, folded into the modules that
    read them before analysis (see `fold_constants`).
    """

    def __init__(
        self,
        source: SourceLookup,
        allowed: Callable[[str], bool],
        selected: Mapping[str, frozenset[str]],
        generated: Mapping[str, tuple[str, bool]] | None = None,
        overrides: Mapping[str, Mapping[str, str]] | None = None,
        *,
        constants: Constants | None = None,
    ) -> None:
        self.source = source
        self.allowed = allowed
        self.selected = selected
        self.generated = dict(generated or {})
        self.overrides = overrides or {}
        self.constants = constants or {}
        self.modules: dict[str, Module] = {}
        self._sources: dict[str, tuple[str, bool] | None] = {}
        self.kept: dict[str, set[int]] = {}
        self.used: dict[str, set[str]] = {}  # module -> import aliases in use

    # --- entry points

    def whole(self, name: str) -> None:
        """Ship all of module `name`."""
        module = self.load(name)
        if module is None:
            return
        for i, st in enumerate(module.statements):
            if st.kind == "import":
                self._keep_import(module, i)
                self.used[name].update(st.refs)
                for ref in st.refs.values():
                    self._follow(ref, bare=False)
            elif st.kind not in ("docstring", "skip", "delete"):
                self._keep(module, i)

    def need(self, name: str, attr: str) -> None:
        """Ship top-level name `attr` of module `name` (a submodule when it names one)."""
        module = self.load(name)
        if module is None:
            return
        if attr in module.aliases:
            self._use_alias(module, attr)
        elif attr in module.bindings:
            for i in module.bindings[attr]:
                self._keep(module, i)
        elif self.exists(f"{name}.{attr}"):
            self.load(f"{name}.{attr}")
        else:
            raise InternalError(f"{name} has no top-level name {attr!r}")

    def load(self, name: str) -> Module | None:
        """Ship module `name` with its always-kept statements; None when it is not first-party."""
        if name in self.modules:
            return self.modules[name]
        module = self._analyze(name)
        if module is None:
            return None
        self.modules[name] = module
        self.kept[name] = set()
        self.used[name] = set()
        if "." in name:
            self.load(name.rsplit(".", 1)[0])
        if module.text is not None:
            self.whole(name)
            return module
        for i, st in enumerate(module.statements):
            if st.kind in ("future", "effect") or (st.kind == "registration" and self._registration_root(module, st)):
                self._keep(module, i)
        return module

    # --- results

    def kept_statements(self, name: str) -> list[ast.stmt]:
        """The statements module `name` keeps, import aliases narrowed to the used ones."""
        module = self.modules[name]
        bound = {n for i in self.kept[name] for n in module.statements[i].defines}
        out = []
        for i, st in enumerate(module.statements):
            if i in self.kept[name]:
                out.append(self._narrowed(st, self.used[name]) if st.kind == "import" else st.node)
            elif st.kind == "delete" and st.defines and st.defines <= bound:
                out.append(st.node)
        return out

    def uncovered(self) -> dict[str, set[str]]:
        """Selected kernels that no kept registration accounts for, by module (should be empty)."""
        missing: dict[str, set[str]] = {}
        for name, kernels in self.selected.items():
            module = self.modules.get(name)
            kept = [module.statements[i] for i in sorted(self.kept[name])] if module else []
            registrations = [st for st in kept if st.kind == "registration"]
            if any(st.dynamic and not st.candidates for st in registrations):
                continue  # registers names we cannot see: trust it (the runtime check will tell)
            covered = {n for st in registrations for n in (*st.registers, *st.candidates)}
            if set(kernels) - covered:
                missing[name] = set(kernels) - covered
        return missing

    # --- internals

    def _analyze(self, name: str) -> Module | None:
        if name in self.generated:
            text, is_package = self.generated[name]
            return analyze(name, ast.parse(text), is_package, self.exists, text=text)
        if not (name == "etbuild" or name.startswith("etbuild.")):
            return None
        if not self.allowed(name):
            raise InternalError(f"the trimmed runtime would need {name}, which is not part of the runtime")
        found = self._source(name)
        if found is None:
            raise InternalError(f"no source for module {name}")
        text, is_package = found
        tree = _override(ast.parse(text), self.overrides.get(name, {}))
        return analyze(name, fold_constants(tree, name, is_package, self.constants), is_package, self.exists)

    def _source(self, name: str) -> tuple[str, bool] | None:
        if name not in self._sources:
            self._sources[name] = self.source(name)
        return self._sources[name]

    def exists(self, name: str) -> bool:
        """Whether `name` is a first-party module (others are never followed, so never asked)."""
        return name in self.generated or (self._first_party(name) and self._source(name) is not None)

    def _registration_root(self, module: Module, st: Statement) -> bool:
        mine = self.selected.get(module.name, frozenset())
        if mine & set(st.registers):
            return True
        if not st.dynamic:
            return False
        if st.candidates:
            return bool(mine & st.candidates)
        literal = {n for s in module.statements for n in (*s.registers, *s.candidates)}
        return bool(mine - literal)

    def _keep(self, module: Module, i: int) -> None:
        if i in self.kept[module.name]:
            return
        self.kept[module.name].add(i)
        st = module.statements[i]
        for name in st.names_read:
            self._use(module, name, st)
        for ref in st.local_imports:
            self._follow(ref, bare=False)

    def _use(self, module: Module, name: str, st: Statement) -> None:
        """Statement st of module reads `name` (bare, or as `name.attr`); builtins bind nothing."""
        for j in module.bindings.get(name, []):
            if module.statements[j].kind != "import":
                self._keep(module, j)
        if name not in module.aliases:
            return
        self._mark_alias(module, name)
        ref = module.aliases[name]
        if isinstance(ref, ModuleRef) and name not in st.uses and self._first_party(ref.module):
            self.load(ref.module)
            for base, attr in st.attrs:
                if base == name:
                    self.need(ref.module, attr)
        else:
            self._follow(ref, bare=True)

    def _use_alias(self, module: Module, alias: str) -> None:
        self._mark_alias(module, alias)
        self._follow(module.aliases[alias], bare=True)

    def _mark_alias(self, module: Module, alias: str) -> None:
        self.used[module.name].add(alias)
        for i in module.bindings[alias]:
            if module.statements[i].kind == "import":
                self._keep_import(module, i)

    def _keep_import(self, module: Module, i: int) -> None:
        if i not in self.kept[module.name]:
            self.kept[module.name].add(i)
            for name in module.statements[i].loads:
                self.load(name)

    def _follow(self, ref: Ref, bare: bool) -> None:
        if not self._first_party(ref.module):
            return
        if isinstance(ref, NameRef):
            self.need(ref.module, ref.name)
        elif bare:
            self.whole(ref.module)
        else:
            self.load(ref.module)

    def _first_party(self, name: str) -> bool:
        return name in self.generated or name == "etbuild" or name.startswith("etbuild.")

    @staticmethod
    def _narrowed(st: Statement, used: set[str]) -> ast.stmt:
        node = copy.copy(st.node)
        assert isinstance(node, (ast.Import, ast.ImportFrom))
        node.names = [a for a in node.names if (a.asname or a.name.split(".")[0]) in used]
        return node


def _override(tree: ast.Module, overrides: Mapping[str, str]) -> ast.Module:
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


class _Strip(ast.NodeTransformer):
    """Removes string statements, function signature annotations and unevaluated variable annotations.

    With `lazy` (the module imported `from __future__ import annotations`) that import goes too,
    and the annotations Python still evaluates without it (class-level ones, module-level `x: T`)
    become the strings it made of them, so nothing evaluates an annotation that did not before:
    forward references and names bound only under `if TYPE_CHECKING:` keep working.
    """

    def __init__(self, lazy: bool) -> None:
        self.lazy = lazy
        self.in_class = False

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list):
                setattr(node, name, [s for s in stmts if not _is_string(s)])
        return nonempty(node)

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


def _is_string(node: ast.stmt) -> bool:
    """A statement that is only a string literal: a docstring, anywhere; it does nothing."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _lazy_annotations(statements: list[ast.stmt]) -> bool:
    return any(
        isinstance(s, ast.ImportFrom) and s.module == "__future__" and any(a.name == "annotations" for a in s.names)
        for s in statements
    )


def render(statements: list[ast.stmt]) -> str:
    """Source text of the statements, without string statements, comments or signature annotations."""
    tree = _Strip(_lazy_annotations(statements)).visit(ast.Module(body=copy.deepcopy(statements), type_ignores=[]))
    text = ast.unparse(ast.fix_missing_locations(tree))
    return text + "\n" if text else ""
