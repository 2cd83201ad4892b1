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

Constants (feature flags) are folded before a module is classified: `Shaker(constants=…)`
gives values to top-level names of some modules, and every read of one, `alias.NAME` on a
module alias or a bare name from `from module import NAME`, becomes its value. Then `if`,
`elif`, `while`, `x if c else y`, `not` and `and`/`or` fold where the constants decide them,
bottom-up, and what follows a `return`, `raise`, `break` or `continue` goes, so the code
behind an off flag, and what only it used, does not ship; an import used only for flags goes
with it. Code holding a `yield`, `global` or `nonlocal` stays even when it cannot run (its
function would change). Names of such a module that have no value given stay ordinary uses.
Assigning or deleting a constant is an `InternalError`.

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
    own = _bound(node.target) if isinstance(node, (ast.For, ast.AsyncFor)) else set()
    return Statement(
        node, kind, frozenset(_bound(node)), frozenset(uses.names - own),
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
    for alias, path in _alias_paths(node, module, is_package):
        if isinstance(node, ast.Import) or exists(path):
            refs[alias] = ModuleRef(path)
        else:
            base, name = path.rsplit(".", 1)
            refs[alias] = NameRef(base, name)
    return refs


def _alias_paths(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """(alias, the dotted path it is bound to) for each alias an import statement binds.

    `import a.b.c` binds `a` to `a`; `from a.b import c` binds `c` to `a.b.c`, module or not.
    """
    if isinstance(node, ast.Import):
        for a in node.names:
            yield (a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0])
        return
    base = _absolute(node, module, is_package)
    for a in node.names:
        if a.name == "*":
            raise InternalError(f"{module}: `from {base} import *` cannot be tree-shaken")
        yield a.asname or a.name, f"{base}.{a.name}"


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _bound(node: ast.AST) -> set[str]:
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


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def _scope_locals(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
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
        if not isinstance(n, _SCOPES):
            stack.extend(ast.iter_child_nodes(n))
    return names - declared_global


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
        self.scopes.append(_scope_locals(node))
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


# ---------------------------------------------------------------------------- constants


Value = bool | int | str | None
Constants = Mapping[str, Mapping[str, Value]]


def fold_constants(tree: ast.Module, module: str, is_package: bool, constants: Constants) -> ast.Module:
    """The module with its reads of `constants` replaced by their values and what they decide folded."""
    flags = {f"{m}.{name}": value for m, names in constants.items() for name, value in names.items()}
    paths = _import_paths(tree, module, is_package)
    if not any(f == p or f.startswith(f"{p}.") for f in flags for p in paths.values()):
        return tree  # reads no flag: left as written
    folded = _Fold(module, paths, flags).visit(tree)
    assert isinstance(folded, ast.Module)
    return folded


def _import_paths(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Top-level import aliases -> the dotted path each is bound to, for those nothing else rebinds."""
    paths: dict[str, set[str]] = {}
    other = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias, path in _alias_paths(node, module, is_package):
                paths.setdefault(alias, set()).add(path)
        else:
            other |= _bound(node)
    return {alias: path.pop() for alias, path in paths.items() if len(path) == 1 and alias not in other}


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
        return _nonempty(node)

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
        return self._scope(node, _scope_locals(node))

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return self._scope(node, set().union(*(_bound(s) for s in node.body)))

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
        if not isinstance(n, _SCOPES):
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


def _nonempty(node: ast.AST) -> ast.AST:
    """node with `pass` in each statement list it needs that has become empty."""
    needed = {
        "body": isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case)),
        "finalbody": getattr(node, "handlers", None) == [],  # a `try` needs handlers or a `finally`
    }
    for name, required in needed.items():
        if required and getattr(node, name, None) == []:
            setattr(node, name, [ast.Pass()])
    return node


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
        return _nonempty(node)

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
