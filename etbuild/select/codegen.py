"""Write a trimmed runtime: the runtime core plus only the kernels a selection needs.

The tree under `out_dir/etbuild/` imports on its own with numpy and flatbuffers:

    etbuild/__init__.py, errors.py          the package and its errors
    etbuild/runtime/**                      what loading and running a program needs
    etbuild/runtime/kernel_registry.py             the registry; load_all() filters to SELECTED
    etbuild/kernels/selected.py             generated: imports the kernel modules, SELECTED
    etbuild/kernels/<library>/<family>.py   only the selected kernels and what they use
    etbuild/kernels/<library>/__init__.py   generated: imports nothing
    etbuild/schema/__init__.py              generated: program.fbs, parsed at codegen time and
                                            pruned to the tables and fields the runtime reads,
                                            and the whole layout of each schema its backends read
    etbuild/runtime/format/program.py       the program's types (program.fbs's mirror), cut like the
                                            rest and then to the pruned schema's tables and fields
    etbuild/runtime/backend_registry.py            BACKENDS: only the backends the programs name
    etbuild/backends/<name>/**              the runtime half of each of them, cut as the rest

Every module is cut from its source by `shake`: only the statements reachable from the
runtime's entry points and the selected kernel registrations, without docstrings or
comments, and with the runtime features (`etbuild.runtime.features`) the programs do not
use folded to False, so the code behind them is gone. Every file starts with a comment
naming its generator and origin; `selected.py` names the recipe, kernels and features.
The runner (`etbuild.runtime.runner`) does not ship: it is the verify stage's driver, not
part of a product's runtime.
`out_dir/<name>-runtime.zip` holds the same tree (sorted entries, fixed timestamps) and is
importable with zipimport.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import pkgutil
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import jinja2

from etbuild.errors import InternalError, StageError
from etbuild.fsutil import atomic_dir, write_bytes
from etbuild.runtime import features as runtime_features
from etbuild.runtime.backend_registry import BACKENDS, Backend, backend_ids
from etbuild.runtime.checks import KIND_TYPES
from etbuild.runtime.format import flat_tensor
from etbuild.runtime.format.fbs import load_schema
from etbuild.runtime.format.reader import Layout, layout
from etbuild.runtime.kernel_registry import KERNEL_LIBRARIES, load_all
from etbuild.runtime.tensor import SCALAR_TYPE_TO_DTYPE
from etbuild.select.render import render
from etbuild.select.schema_cut import cut_mirror, identifiers, kept_tables, schema_module
from etbuild.select.selection import Selection
from etbuild.select.shake import Shaker

TEMPLATES = Path(__file__).resolve().parent / "templates"
PACKAGE = "etbuild"
# Modules shipped whole: the public runtime API (errors and the registry ship what it uses).
ENTRY_MODULES = ("etbuild", "etbuild.runtime")
RUNTIME_SIDE = ("etbuild.runtime", "etbuild.kernels", "etbuild.backends", "etbuild.schema")
SELECTED_MODULE = "etbuild.kernels.selected"
SCHEMA_MODULE = "etbuild.schema"
PTE_MODULE = "etbuild.runtime.format.pte"
MIRROR_MODULE = "etbuild.runtime.format.program"
REGISTRY_MODULE = "etbuild.runtime.kernel_registry"
TENSOR_MODULE = "etbuild.runtime.tensor"
CHECKS_MODULE = "etbuild.runtime.checks"
FEATURES_MODULE = "etbuild.runtime.features"
BACKENDS_MODULE = "etbuild.runtime.backend_registry"
READER_MODULE = "etbuild.runtime.format.reader"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class RuntimeFile:
    """One file of a trimmed runtime: its path in the tree, size, and where it came from."""

    path: str  # "etbuild/runtime/program.py"
    size: int
    origin: str  # the module it was cut from, or the template that generated it


@dataclass(frozen=True)
class RuntimeArtifact:
    """A written trimmed runtime. Put `root` (or `zip_path`) on sys.path to import it."""

    root: Path
    package: Path
    zip_path: Path
    files: tuple[RuntimeFile, ...]
    kernels: tuple[str, ...]
    features: tuple[str, ...]

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(self.root / f.path for f in self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def zip_bytes(self) -> int:
        return self.zip_path.stat().st_size


@dataclass(frozen=True)
class Contents:
    """What a trimmed runtime holds beyond its core.

    kernels: canonical kernel names. features: names in etbuild.runtime.features.
    scalar_types: the ScalarType codes its tensors may have (None: every code the runtime knows).
    backends: the backend ids (`XnnpackBackend`) its programs delegate to.
    """

    kernels: tuple[str, ...]
    features: tuple[str, ...] = runtime_features.NAMES
    scalar_types: tuple[int, ...] | None = None
    backends: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Sort and deduplicate every field (so equal contents generate equal trees); check the features."""
        unknown = sorted(set(self.features) - set(runtime_features.NAMES))
        if unknown:
            raise InternalError(f"unknown runtime features {unknown}; known: {', '.join(runtime_features.NAMES)}")
        object.__setattr__(self, "kernels", tuple(sorted(set(self.kernels))))
        object.__setattr__(self, "features", tuple(sorted(set(self.features))))
        object.__setattr__(self, "backends", tuple(sorted(set(self.backends))))
        if self.scalar_types is not None:
            object.__setattr__(self, "scalar_types", tuple(sorted(set(self.scalar_types))))


def generate_runtime(
    selection: Selection, out_dir: str | Path, *, source: str, name: str | None = None
) -> RuntimeArtifact:
    """Write the trimmed runtime for a selection under out_dir (see the module docstring).

    source: what the runtime is for (the recipe path), named in `selected.py`.
    name: the zip is `<name>-runtime.zip`; default: the stem of source.
    """
    unknown = sorted(set(selection.backends) - set(backend_ids()))
    if unknown:
        raise StageError(f"{source}: the programs delegate to backends {', '.join(unknown)}, which etbuild's "
                         f"runtime does not have (it has: {', '.join(backend_ids()) or 'none'})")
    contents = Contents(selection.names, selection.features, selection.scalar_types, selection.backends)
    return write_runtime(contents, out_dir, source=source, name=name)


def write_runtime(
    contents: Contents | Iterable[str], out_dir: str | Path, *, source: str, name: str | None = None
) -> RuntimeArtifact:
    """Write a runtime with the given contents (kernel names alone: every feature and dtype)."""
    if not isinstance(contents, Contents):
        contents = Contents(tuple(contents))
    files = runtime_sources(contents, source)
    out = Path(out_dir)
    _replace_tree(out, files)
    zip_path = out / f"{name or Path(source).stem or PACKAGE}-runtime.zip"
    write_bytes(zip_path, zip_bytes(files))
    listed = tuple(RuntimeFile(path, len(text.encode()), origin) for path, (text, origin) in sorted(files.items()))
    return RuntimeArtifact(out, out / PACKAGE, zip_path, listed, contents.kernels, contents.features)


def runtime_sources(contents: Contents, source: str) -> dict[str, tuple[str, str]]:
    """The trimmed tree in memory: path -> (text, origin)."""
    env = _templates()
    shaker = _shaken(env, contents, source)
    files = {}
    for mod in shaker.modules.values():
        if mod.name in (SCHEMA_MODULE, MIRROR_MODULE):
            continue  # pruned to what the other modules read, below
        if mod.text is not None:
            text, origin = mod.text, _generated_origin(mod.name)
        else:
            origin = mod.name
            body = render(shaker.kept_statements(mod.name), in_place=True)  # the shaker is ours alone
            text = env.get_template("module.py.j2").render(origin=origin, body=body)
        files[mod.path] = (text, origin)
    trees = {path: compile(text, path, "exec", ast.PyCF_ONLY_AST) for path, (text, _) in files.items()}
    schema, mirror = shaker.modules[SCHEMA_MODULE], shaker.modules[MIRROR_MODULE]
    reads = identifiers(trees.values())
    text = schema_module(env, reads, _layouts(contents))
    files[schema.path] = (text, "template schema.py.j2")
    body = render(cut_mirror(shaker.kept_statements(MIRROR_MODULE), kept_tables(load_schema(), reads)), in_place=True)
    files[mirror.path] = (env.get_template("module.py.j2").render(origin=MIRROR_MODULE, body=body), MIRROR_MODULE)
    for path in (schema.path, mirror.path):
        trees[path] = compile(files[path][0], path, "exec", ast.PyCF_ONLY_AST)
    for path, tree in trees.items():
        compile(tree, path, "exec")  # a broken cut is our bug: fail here, not on the device
    return files


def _shaken(env: jinja2.Environment, contents: Contents, source: str) -> Shaker:
    """Every module the runtime and the kernels need, cut from the entry modules."""
    by_module = kernel_modules(contents.kernels)
    generated = _generated_modules(env, contents, by_module, source)
    constants = {FEATURES_MODULE: {name: name in contents.features for name in runtime_features.NAMES}}
    shaker = Shaker(module_source, runtime_side, by_module, generated, _overrides(env, contents), constants=constants)
    backend_modules = [m for b in selected_backends(contents) for m in package_modules(b.runtime)]
    for module in (*ENTRY_MODULES, SELECTED_MODULE, *backend_modules):
        shaker.whole(module)
    uncovered = shaker.uncovered()
    if uncovered:
        raise InternalError(f"tree shaking lost the registrations of {sorted(set().union(*uncovered.values()))}")
    return shaker


def _overrides(env: jinja2.Environment, contents: Contents) -> dict[str, dict[str, str]]:
    """Definitions a trimmed runtime replaces: its schema layout, its registry (whose kernels ship
    without annotations: their argument kinds come as a table), its argument kinds' value types,
    its backends table, its dtype table."""
    registry = load_all()
    kinds = {name: registry[name].kinds for name in contents.kernels}
    letters = sorted(set("".join(kinds.values())) - {">"})
    kind_types = {k: KIND_TYPES[k] for k in letters}
    backends = selected_backends(contents)
    out = {
        PTE_MODULE: {"program_layout": env.get_template("program_layout.py.j2").render()},
        REGISTRY_MODULE: {
            "load_all": env.get_template("load_all.py.j2").render(),
            "argument_kinds": env.get_template("argument_kinds.py.j2").render(kinds=repr(kinds)),
        },
        CHECKS_MODULE: {"KIND_TYPES": env.get_template("kind_table.py.j2").render(kinds=repr(kind_types))},
        BACKENDS_MODULE: {"BACKENDS": env.get_template("backends_table.py.j2").render(
            backends={name: asdict(b) for name, b in BACKENDS.items() if b in backends})},
        READER_MODULE: {"schema_layout": env.get_template("schema_layout.py.j2").render()},
    }
    if contents.scalar_types is not None:
        dtypes = [(code, SCALAR_TYPE_TO_DTYPE[code].name) for code in contents.scalar_types]
        out[TENSOR_MODULE] = {"SCALAR_TYPE_TO_DTYPE": env.get_template("dtype_table.py.j2").render(dtypes=dtypes)}
    return out


def selected_backends(contents: Contents) -> list[Backend]:
    """The backends of the table whose ids the contents name, in table order."""
    return [b for b in BACKENDS.values() if b.id in contents.backends]


def package_modules(name: str) -> list[str]:
    """A module and, when it is a package, every module under it (sorted): a backend's runtime
    half ships whole, its node builders register themselves when imported."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        return [name]
    found = pkgutil.walk_packages(spec.submodule_search_locations, prefix=f"{name}.")
    return [name, *sorted(m.name for m in found)]


def kernel_modules(kernels: Iterable[str]) -> dict[str, frozenset[str]]:
    """Selected kernel names by the module that registers them; StageError for unknown ones."""
    registry = load_all()
    missing = sorted(k for k in kernels if k not in registry)
    if missing:
        raise StageError(f"no kernel library of etbuild has a kernel for {', '.join(missing)}")
    by_module: dict[str, set[str]] = {}
    for k in kernels:
        by_module.setdefault(registry[k].module, set()).add(k)
    return {m: frozenset(names) for m, names in sorted(by_module.items())}


def _generated_origin(module: str) -> str:
    return "template selected.py.j2" if module == SELECTED_MODULE else "template empty_package.py.j2"


def _generated_modules(
    env: jinja2.Environment, contents: Contents, by_module: Mapping[str, frozenset[str]], source: str
) -> dict[str, tuple[str, bool]]:
    selected = env.get_template("selected.py.j2").render(
        source=source, modules=sorted(by_module), kernels=contents.kernels, features=contents.features,
        dtypes=None if contents.scalar_types is None else [SCALAR_TYPE_TO_DTYPE[c].name for c in contents.scalar_types],
    )
    schema = schema_module(env, None, _layouts(contents))  # what the shaker sees; written pruned by runtime_sources
    out = {SELECTED_MODULE: (selected, False), SCHEMA_MODULE: (schema, True)}
    for library in KERNEL_LIBRARIES:
        out[library] = (env.get_template("empty_package.py.j2").render(origin=library), True)
    return out


def _layouts(contents: Contents) -> dict[str, Layout]:
    """The layouts of the schemas the selected backends read, and the `.ptd` schema with EXTERNAL_DATA, by file."""
    from etbuild.schema import SCHEMA_DIR

    data = [flat_tensor.SCHEMA_FILE] if "EXTERNAL_DATA" in contents.features else []
    names = sorted({*data, *(f for b in selected_backends(contents) for f in b.schemas)})
    return {name: layout(load_schema(SCHEMA_DIR / name)) for name in names}


def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
        autoescape=False,
    )


def runtime_side(module: str) -> bool:
    """Whether a module belongs to the torch-free runtime side that trimmed runtimes ship."""
    return module in (PACKAGE, "etbuild.errors") or any(
        module == p or module.startswith(p + ".") for p in RUNTIME_SIDE
    )


def module_source(module: str) -> tuple[str, bool] | None:
    """(source text, is_package) of an importable module, or None."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent is not a package
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_text(), spec.submodule_search_locations is not None


def _replace_tree(out: Path, files: Mapping[str, tuple[str, str]]) -> None:
    """Write the tree beside its final place, then swap it in (no half-written tree)."""
    with atomic_dir(out / PACKAGE) as staging:
        for path, (text, _) in files.items():
            target = staging / Path(path).relative_to(PACKAGE)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


def zip_bytes(files: Mapping[str, tuple[str, str]]) -> bytes:
    """A deterministic zip of the tree: sorted entries, fixed timestamps and modes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            zf.writestr(info, files[path][0].encode())
    return buf.getvalue()
