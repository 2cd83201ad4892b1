"""The shape of the code base: no import cycle, folders that depend one way, small modules and functions.

Imports are read from the source (every `import` and `from … import` anywhere in a module:
function-local ones and those under `if TYPE_CHECKING:` included), so a circle hidden inside a
function still fails here. An import names the module it loads: `from etbuild.select import
collect` depends on `etbuild.select` (its `__init__`), `from etbuild.runtime import features`
on `etbuild.runtime.features`.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# import name -> repository folder, as pyproject.toml's [tool.setuptools.package-dir] maps them
FOLDERS = {"etbuild": "etbuild", "etbuild.runtime": "runtime", "etbuild.kernels": "kernels",
           "etbuild.backends": "backends", "etbuild.schema": "schema"}
# The torch-free folders, in the order they may depend on each other: each only on the ones before it.
LAYERS = ("runtime", "kernels", "backends")
# The build side bottom to top, as docs/architecture.md draws it: a folder of `etbuild/` (or a module at its
# root) imports only those of its own row and the rows before it. The torch-free folders are checked above.
BUILD_LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "fsutil", "extras"),
    ("recipe", "cache"),
    ("zoo", "model"),
    ("graphs",),
    ("lowering",), ("memory",), ("select",), ("devtools",), ("quantize",), ("llm",),
    ("stages", "pipeline"),
    ("verify",),
    ("build",),
    ("tools", "release"),
    ("cli",),
)
# Imports that break the drawing today, each with what it needs; the tests fail on any other (and on one of these
# that is gone, so that the list shrinks with the fixes). None today: a new break is fixed, or listed here with why.
KNOWN_BREAKS: dict[str, str] = {}
"""Each entry: `module -> module` (an import against the rows) or `folder <-> folder` (two folders that import each
other), and why it is there until it is fixed."""
DOIT_MODULES = {"etbuild.build.tasks", "etbuild.build.driver", "etbuild.build.state"}
"""The modules that import doit: tasks (calls as tasks), driver (runs them), state (doit's record of them)."""
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 50
MAX_ROOT_MODULES = 8


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the package, by import name."""
    found = {}
    for package, folder in FOLDERS.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            parts = list(f.relative_to(ROOT / folder).with_suffix("").parts)
            if package == "etbuild" and parts[0] in (*LAYERS, "schema"):
                continue
            found[".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])] = f
    return found


def _known(name: str) -> str | None:
    """The module `name` loads: itself, or the nearest package above it that is ours."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {t for a in node.names if (t := _known(a.name))}
    base = node.module or ""
    if node.level:
        package = module.split(".") if modules()[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    full = {f"{base}.{a.name}" for a in node.names}
    return {name if name in modules() else _known(base) for name in full} - {None}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, anywhere in its source."""
    graph = {}
    for module, path in modules().items():
        nodes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import | ast.ImportFrom)]
        graph[module] = set().union(*(_imported(module, n) for n in nodes)) - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def folder(module: str) -> str:
    """The repository folder a module lives in (`etbuild` for the build side)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "etbuild"


def test_the_analysis_sees_function_local_imports() -> None:
    graph = import_graph()
    assert "etbuild.build.driver" in graph["etbuild.cli.build"]  # imported inside run_build
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (each line one circle):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_runtime_kernels_and_backends_depend_one_way() -> None:
    """kernels may use the runtime, backends the runtime and kernels, never the reverse; the
    torch-free folders never use the build side except its errors and the schema package. A
    package's `__init__` may wire defaults, so it is left out."""
    allowed_build_side = {"etbuild", "etbuild.errors", "etbuild.schema"}
    wrong = []
    for module, targets in import_graph().items():
        here = folder(module)
        if here not in LAYERS or modules()[module].name == "__init__.py":
            continue
        for target in targets:
            there = folder(target)
            upward = there in LAYERS and LAYERS.index(there) > LAYERS.index(here)
            runtime_side = here != "backends" or "runtime" in module.split(".") or "format" in module.split(".")
            into_build = there == "etbuild" and target not in allowed_build_side and runtime_side
            if upward or into_build:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def build_folder(module: str) -> str | None:
    """The build-side folder of a module (a root module by its own name), None for the torch-free side."""
    parts = module.split(".")
    if folder(module) != "etbuild" or (len(parts) > 1 and parts[1] == "schema"):
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def against_build_layers(graph: dict[str, set[str]]) -> set[str]:
    """`a -> b` for every import of the graph from a build-side folder into a later row of BUILD_LAYERS."""
    row = {name: k for k, names in enumerate(BUILD_LAYERS) for name in names}
    wrong = set()
    for module, targets in graph.items():
        here = build_folder(module)
        for target in targets:
            there = build_folder(target)
            if here is not None and there is not None and row.get(there, 0) > row.get(here, len(BUILD_LAYERS)):
                wrong.add(f"{module} -> {target}")
    return wrong


def mutual_folders(graph: dict[str, set[str]]) -> set[str]:
    """`a <-> b` for every two folders (of either side; `a` first by name) that import each other."""
    def name(module: str) -> str:
        return build_folder(module) or folder(module)
    between = {(name(m), name(t)) for m, targets in graph.items() for t in targets if name(m) != name(t)}
    return {f"{a} <-> {b}" for a, b in between if (b, a) in between and a < b}


def test_the_layer_checks_find_what_they_are_written_for() -> None:
    upward = {"etbuild.recipe.config": {"etbuild.verify.stage"}, "etbuild.verify.stage": {"etbuild.recipe.config"},
              "etbuild.cli.build": {"etbuild.build.driver"}, "etbuild.errors": {"etbuild.model"}}
    assert against_build_layers(upward) == {"etbuild.recipe.config -> etbuild.verify.stage",
                                            "etbuild.errors -> etbuild.model"}
    assert mutual_folders(upward) == {"recipe <-> verify"}
    same_row = {"etbuild.tools.profile": {"etbuild.release.check"}, "etbuild.release.check": {"etbuild.tools.x"}}
    assert not against_build_layers(same_row) and mutual_folders(same_row) == {"release <-> tools"}
    assert not mutual_folders({"etbuild.backends.aot": {"etbuild.lowering.forms"}})
    assert mutual_folders({"etbuild.backends.aot": {"etbuild.lowering.forms"},
                           "etbuild.lowering.partition": {"etbuild.backends.aot"}}) == {"backends <-> lowering"}


def test_every_build_side_folder_has_a_row() -> None:
    rows = {name for names in BUILD_LAYERS for name in names}
    missing = {build_folder(m) for m in modules()} - rows - {None}
    assert not missing, f"build-side folders missing from BUILD_LAYERS (and docs/architecture.md): {sorted(missing)}"


def test_the_build_side_imports_down_its_layers_only() -> None:
    wrong = against_build_layers(import_graph()) - set(KNOWN_BREAKS)
    assert not wrong, "imports against the build side's layers (BUILD_LAYERS):\n" + "\n".join(sorted(wrong))


def test_no_two_folders_import_each_other() -> None:
    wrong = mutual_folders(import_graph()) - set(KNOWN_BREAKS)
    assert not wrong, "folders that import each other:\n" + "\n".join(sorted(wrong))


def test_the_known_breaks_are_still_there() -> None:
    graph = import_graph()
    found = against_build_layers(graph) | mutual_folders(graph)
    present = {k for k in KNOWN_BREAKS if "<->" in k or all(m.strip() in modules() for m in k.split("->"))}
    gone = sorted(present - found)
    assert not gone, "fixed: take these out of KNOWN_BREAKS:\n" + "\n".join(gone)


def test_only_the_doit_modules_import_doit() -> None:
    found = {module for module, path in modules().items() for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Import | ast.ImportFrom)
             and any(n.split(".")[0] == "doit" for n in ([node.module or ""] if isinstance(node, ast.ImportFrom)
                                                          else [a.name for a in node.names]))}
    assert found == DOIT_MODULES


def test_package_root_holds_few_modules() -> None:
    root = sorted(p.name for p in (ROOT / "etbuild").glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the root of etbuild/: {root}"


def test_no_module_over_the_line_limit() -> None:
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules().values()}
    long = {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_the_line_limit() -> None:
    long = []
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)
