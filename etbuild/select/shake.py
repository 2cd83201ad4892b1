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
classified (see `etbuild.select.fold_flags`), so the code behind an off flag, and what only it
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
from collections.abc import Callable, Mapping

from etbuild.errors import InternalError
from etbuild.select.fold_flags import Constants, fold_constants
from etbuild.select.render import override
from etbuild.select.statements import (
    Module,
    ModuleRef,
    NameRef,
    Ref,
    SourceLookup,
    Statement,
    analyze,
)


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
        tree = override(ast.parse(text), self.overrides.get(name, {}))
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
