"""What the schema cannot say about a recipe, checked on the merged document after the schema.

`check(doc)` runs every check in order; each raises the first problem as a located
RecipeError. `reject_unsupported` is separate: it refuses sections whose stage does not exist
yet, after everything else about them has been checked.
"""

from __future__ import annotations

from typing import Any

from etbuild.backends.options import OptionError, parse_options
from etbuild.errors import did_you_mean
from etbuild.recipe.config import default
from etbuild.recipe.parse import Doc
from etbuild.recipe.places import KeyPath, format_key_path, located_error, show
from etbuild.runtime.backend_registry import BACKENDS, backend_options

NOT_SUPPORTED_YET: tuple[KeyPath, ...] = ()
"""Key paths whose stage does not exist yet: a recipe is rejected when one holds a non-null value.
A trailing index means "a list with that item": `("backends", 0)` would be a first backend."""

INTEGER_DTYPES = ("int64", "int32", "uint8", "int8")
MIN_DYNAMIC_EXAMPLE = 2
"""torch.export specializes an example size of 0 or 1 to a constant, so a dynamic dimension's
declared (example) size must be at least this; its range may still start at 1."""
INT4_SCHEME = "int8-dynamic-int4-weight"
STATIC_SCHEME = "int8-static"
INT4_BACKEND = "xnnpack"
"""ExecuTorch runs int4 linear weights only inside the XNNPACK delegate (no portable kernel takes them)."""


def check(doc: Doc) -> None:
    """Every check of this module, in the order a reader meets the sections."""
    _check_inputs_or_methods(doc)
    _check_inputs(doc)
    _check_dynamic(doc)
    _check_quantize(doc)
    _check_backends(doc)
    _check_memory(doc)
    _check_verify_fallback(doc)


def _lookup(data: Any, path: KeyPath) -> Any:
    """The value at `path`, or None when the path does not exist."""
    for part in path:
        if isinstance(part, int):
            found = isinstance(data, list) and part < len(data)
        else:
            found = isinstance(data, dict) and part in data
        if not found:
            return None
        data = data[part]
    return data


def reject_unsupported(doc: Doc) -> None:
    """Reject a recipe that sets a key path of `NOT_SUPPORTED_YET`."""
    for path in NOT_SUPPORTED_YET:
        if _lookup(doc.data, path) is not None:
            section = path
            while isinstance(section[-1], int):
                section = section[:-1]
            raise located_error(doc.where(path), path, f"not supported yet: {format_key_path(section)}")


# ---------------------------------------------------------------------------- model


def _check_inputs_or_methods(doc: Doc) -> None:
    """`model` gives exactly one of `inputs` (forward) and `methods`; `dynamic` goes with inputs."""
    model = doc.data["model"]
    if "inputs" not in model and "methods" not in model:
        message = "expected 'inputs' (to export forward) or 'methods'; got neither"
        raise located_error(doc.values[("model",)], ("model",), message)
    if "inputs" in model and "methods" in model:
        message = (
            "expected 'inputs' (to export forward) or 'methods', not both"
            f" (model.inputs is set at {doc.where(('model', 'inputs'))})"
        )
        raise located_error(doc.where(("model", "methods")), ("model", "methods"), message)
    if "methods" in model and model.get("dynamic") is not None:
        message = "expected no model.dynamic beside model.methods; set model.methods.<name>.dynamic"
        raise located_error(doc.where(("model", "dynamic")), ("model", "dynamic"), message)


def _declared_methods(model: dict[str, Any]) -> list[tuple[KeyPath, dict[str, Any]]]:
    """(key path, data holding `inputs` and maybe `dynamic`) of each method `model` declares."""
    if "methods" in model:
        return [(("model", "methods", name), spec) for name, spec in model["methods"].items()]
    return [(("model",), model)]


def _check_inputs(doc: Doc) -> None:
    """What the schema cannot say about inputs: `low`/`high` are for integer dtypes, low < high."""
    for method_path, method in _declared_methods(doc.data["model"]):
        for i, spec in enumerate(method["inputs"]):
            _check_input_bounds(doc, (*method_path, "inputs", i), spec)


def _check_input_bounds(doc: Doc, path: KeyPath, spec: dict[str, Any]) -> None:
    bounds = {key: spec[key] for key in ("low", "high") if spec.get(key) is not None}
    if bounds and spec["dtype"] not in INTEGER_DTYPES:
        key = next(iter(bounds))
        message = f"expected {key} only with an integer dtype; got dtype {spec['dtype']}"
        raise located_error(doc.where((*path, key)), (*path, key), message)
    if len(bounds) == 2 and bounds["high"] <= bounds["low"]:
        message = f"expected an integer > low ({bounds['low']}); got {bounds['high']}"
        raise located_error(doc.where((*path, "high")), (*path, "high"), message)


def _check_dynamic(doc: Doc) -> None:
    """Each dynamic dimension names an existing input and dimension, has min <= max, and holds
    the declared size (the export example), which must be at least `MIN_DYNAMIC_EXAMPLE`."""
    for method_path, method in _declared_methods(doc.data["model"]):
        inputs_path = (*method_path, "inputs")
        for index, dims in (method.get("dynamic") or {}).items():
            path = (*method_path, "dynamic", index)
            if int(index) >= len(method["inputs"]):
                count = len(method["inputs"])
                message = (
                    f"expected an index into {format_key_path(inputs_path)}, which has {count}"
                    f" input{'s' * (count != 1)}; got {index}"
                )
                raise located_error(doc.where(path), path, message)
            for dim in dims:
                shape_path = (*inputs_path, int(index), "shape")
                _check_dim(doc, (*path, dim), shape_path, method["inputs"][int(index)]["shape"])


def _check_dim(doc: Doc, path: KeyPath, shape_path: KeyPath, shape: list[int]) -> None:
    """Check the range at `path` (`...dynamic.<input>.<dim>`) against the declared `shape`."""
    dim, bounds = int(path[-1]), _lookup(doc.data, path)
    if dim >= len(shape):
        message = f"expected a dimension of {format_key_path(shape_path)}, {show(shape)}; got {dim}"
        raise located_error(doc.where(path), path, message)
    low, high, size = bounds["min"], bounds["max"], shape[dim]
    if high < low:
        message = f"expected an integer >= min ({low}); got {high}"
        raise located_error(doc.where((*path, "max")), (*path, "max"), message)
    if not low <= size <= high:
        message = (
            f"expected a range that holds {size}, the declared size"
            f" {format_key_path((*shape_path, dim))} (the export example); got [{low}, {high}]"
        )
        raise located_error(doc.where(path), path, message)
    if size < MIN_DYNAMIC_EXAMPLE:
        size_path = (*shape_path, dim)
        message = (
            f"expected a size >= {MIN_DYNAMIC_EXAMPLE} at a dynamic dimension (torch.export"
            f" specializes an example size of 0 or 1; the range may still start at 1); got {size}"
        )
        raise located_error(doc.where(size_path), size_path, message)


# ---------------------------------------------------------------------------- quantize, backends


def _check_quantize(doc: Doc) -> None:
    """Calibration goes with int8-static or gptq weights, group_size with int4 (as the scheme or a
    module's override, or int4 embeddings) and weights with int4 linears; int4 linear weights need the
    xnnpack backend; calibration data or samples; accuracy names one gate."""
    quantize = doc.data.get("quantize")
    if quantize is None:
        return
    schemes = {quantize["scheme"], *(scheme for _, scheme in override_schemes(quantize))}
    _check_int4_backend(doc, quantize)
    int4 = INT4_SCHEME in schemes or quantize.get("embeddings") == "int4"
    where = "in quantize.scheme or quantize.modules"
    gptq = INT4_SCHEME in schemes and quantize.get("weights", default("quantize", "weights")) == "gptq"
    _check_used_with(doc, "calibration", STATIC_SCHEME in schemes or gptq,
                     f"scheme {STATIC_SCHEME} ({where}) or weights gptq")
    int4_what = f"int4 weights (scheme {INT4_SCHEME} {where}, or embeddings int4)"
    _check_used_with(doc, "group_size", int4, int4_what)
    _check_used_with(doc, "weights", INT4_SCHEME in schemes, f"int4 linear weights (scheme {INT4_SCHEME} {where})")
    _check_one_of(doc, ("quantize", "calibration"), ("data", "samples"), required=False)
    _check_one_of(doc, ("quantize", "accuracy"), ("min_snr_db", "top1_agreement"), required=True)


def override_schemes(quantize: dict[str, Any]) -> list[tuple[str, str]]:
    """(glob, scheme) of each `quantize.modules` entry that sets a scheme."""
    found = []
    for glob, value in (quantize.get("modules") or {}).items():
        scheme = value.get("scheme") if isinstance(value, dict) else value
        if scheme is not None:
            found.append((glob, scheme))
    return found


def _check_int4_backend(doc: Doc, quantize: dict[str, Any]) -> None:
    """`int8-dynamic-int4-weight` (the scheme or an override) needs `backends` to list xnnpack."""
    named = [("quantize", "scheme")] if quantize["scheme"] == INT4_SCHEME else []
    named += [("quantize", "modules", glob) for glob, s in override_schemes(quantize) if s == INT4_SCHEME]
    backends = [backend["name"] for backend in doc.data.get("backends") or []]
    if named and INT4_BACKEND not in backends:
        listed = ", ".join(backends) or "none"
        message = (
            f"{INT4_SCHEME} needs backends: [{{name: {INT4_BACKEND}}}]: ExecuTorch runs int4 linear weights only"
            f" inside the XNNPACK delegate; backends lists {listed}"
        )
        raise located_error(doc.where(named[0]), named[0], message)


def _check_used_with(doc: Doc, key: str, used: bool, what: str) -> None:
    """`quantize.<key>`, when written, must be something the quantization uses."""
    path = ("quantize", key)
    if not used and key in doc.data["quantize"]:
        scheme = doc.data["quantize"]["scheme"]
        message = f"expected {key} only with {what}; got scheme {scheme}"
        raise located_error(doc.where(path), path, message)


def _check_one_of(doc: Doc, path: KeyPath, keys: tuple[str, str], required: bool) -> None:
    """The mapping at `path` (if any) sets at most one of `keys`, and one when `required`."""
    section = _lookup(doc.data, path)
    if section is None:
        return
    given = [key for key in keys if section.get(key) is not None]
    if len(given) == 2:
        message = f"expected {keys[0]} or {keys[1]}, not both ({keys[0]} is set at {doc.where((*path, keys[0]))})"
        raise located_error(doc.where((*path, keys[1])), (*path, keys[1]), message)
    if required and not given:
        message = f"expected {keys[0]} or {keys[1]}; got neither"
        raise located_error(doc.where(path), path, message)


def _check_backends(doc: Doc) -> None:
    """A backend is listed once, is one there is, and takes the options the recipe gives it."""
    backends = doc.data.get("backends") or []
    _check_unique(doc, ("backends",), [backend["name"] for backend in backends], "backend")
    for i, backend in enumerate(backends):
        name, path = backend["name"], ("backends", i, "name")
        if name not in BACKENDS:
            known = list(BACKENDS)
            message = f"expected one of the backends {', '.join(known)}; got {name!r}{did_you_mean(name, known)}"
            raise located_error(doc.where(path), path, message)
        try:
            parse_options(backend_options(name), backend.get("options") or {}, name)
        except OptionError as exc:
            options_path = ("backends", i, "options", exc.key)
            raise located_error(doc.where(options_path), options_path, str(exc)) from None


def _check_unique(doc: Doc, items: KeyPath, names: list[str], kind: str) -> None:
    """Item i of the list at `items` is named `names[i]`; no name is used twice."""
    for i, name in enumerate(names):
        if name in names[:i]:
            path = (*items, i, "name")
            raise located_error(doc.where(path), path, f"{kind} {name!r} is already defined")


# ---------------------------------------------------------------------------- memory


def _check_memory(doc: Doc) -> None:
    """Level names are unique and every rule names a level."""
    memory = doc.data.get("memory") or {}
    names = [level["name"] for level in memory.get("levels") or default("memory", "levels")]
    _check_unique(doc, ("memory", "levels"), names, "level")
    for i, rule in enumerate(memory.get("rules") or []):
        if rule["level"] not in names:
            path = ("memory", "rules", i, "level")
            message = f"expected one of the levels {', '.join(names)}; got {rule['level']!r}"
            raise located_error(doc.where(path), path, message + did_you_mean(rule["level"], names))


# ---------------------------------------------------------------------------- verify


LLM_FACTORY = "etbuild.llm.runner:decoder"
"""The factory `model.llm` expands into (`etbuild.recipe.llm.FACTORY`)."""


def _check_verify_fallback(doc: Doc) -> None:
    """`verify.fallback: auto` keeps a quantized language model's layers float: it needs `model.llm` and a
    quantize section."""
    path = ("verify", "fallback")
    if (_lookup(doc.data, path) or "none") == "none":
        return
    if doc.data["model"].get("factory") != LLM_FACTORY:
        problem = "the model is not a model.llm language model"
    elif doc.data.get("quantize") is None:
        problem = "the recipe has no quantize section"
    else:
        return
    message = ("expected fallback auto only with a quantized language model (model.llm and a quantize section); "
               + problem)
    raise located_error(doc.where(path), path, message)
