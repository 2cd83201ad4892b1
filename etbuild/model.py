"""Build a recipe's `nn.Module`, its methods' inputs and their dynamic shapes (AOT: imports torch).

`model.factory` is `package.module:callable` (imported with importlib) or `path/file.py:callable`
(already absolute once the recipe is loaded; imported under a module name unique to the file).
Every failure is a `RecipeError` located at the `model.factory`, `model.weights`, `model.inputs`
or `model.methods.<name>` key.

Functions that take `method` default to `forward`, the one method of a recipe with
`model.inputs`; a recipe with `model.methods` names its own (`recipe.model.methods`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import torch

from etbuild.errors import RecipeError, did_you_mean
from etbuild.recipe import InputSpec, MethodSpec, Recipe

TORCH_DTYPES: Mapping[str, torch.dtype] = MappingProxyType(
    {
        "float32": torch.float32,
        "float16": torch.float16,
        "float64": torch.float64,
        "int64": torch.int64,
        "int32": torch.int32,
        "bool": torch.bool,
        "uint8": torch.uint8,
        "int8": torch.int8,
    }
)
"""Recipe dtype names (the schema's `dtype` enum) to torch dtypes."""

INT_LOW, INT_HIGH = 0, 10
"""Random integer inputs are drawn from [low, high): these when the input gives no bounds."""


def build_model(recipe: Recipe) -> torch.nn.Module:
    """Call the recipe's factory (torch seeded with `model.seed`), load weights, return eval().

    Also checks that the module has every method the recipe exports.
    """
    factory = _resolve_factory(recipe)
    kwargs = recipe.model.factory_kwargs()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.model.seed)
        module = _call_factory(recipe, factory, kwargs)
    if recipe.model.weights is not None:
        _load_weights(recipe, module, recipe.model.weights)
    for method in recipe.model.methods:
        method_callable(module, method.name, recipe)
    return module.eval()


def fresh(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` (as `build_model` made it, never run) to run on fresh state: running a model changes its
    buffers, and one build then serves every run that wants the model as built."""
    return copy.deepcopy(model)


def method_callable(
    model: torch.nn.Module, name: str, recipe: Recipe | None = None
) -> Callable[..., Any]:
    """The bound method `name` of `model` (`forward` included), to export or to run eagerly.

    When the model has no such method: a RecipeError located at the recipe key that asks for
    it (`model.methods.<name>`, or `model.inputs` for forward) if `recipe` is given, else a
    ValueError. `build_model` has already checked every method of its recipe.
    """
    problem = _method_problem(model, name)
    if problem is None:
        bound: Callable[..., Any] = getattr(model, name)
        return bound
    if recipe is None:
        raise ValueError(problem)
    in_methods = "methods" in recipe.section("model")
    raise recipe.error(("model", "methods", name) if in_methods else ("model", "inputs"), problem)


def _method_problem(model: torch.nn.Module, name: str) -> str | None:
    """Why `model.<name>` is not a method to export, or None when it is one."""
    owner = type(model).__name__
    if name == "forward" and type(model).forward is torch.nn.Module.forward:
        return (
            f"the model ({owner}) has no forward method;"
            " list the methods to export in model.methods"
        )
    if not hasattr(model, name):
        message = f"the model ({owner}) has no method '{name}'"
        return message + did_you_mean(name, _own_methods(type(model)))
    value = getattr(model, name)
    if not inspect.ismethod(value):
        return f"expected a method; the model's ({owner}) '{name}' is a {type(value).__name__}"
    return None


def call_method(recipe: Recipe, model: torch.nn.Module, method: str, inputs: tuple[torch.Tensor, ...]) -> Any:
    """`model.<method>(*inputs)` without autograd; the model's code raising is a RecipeError.

    The error is located at the method's inputs, or at `inputs[i].dtype` when, on a fresh
    model, the call succeeds once input i has another dtype (the model's float dtype, or int64).
    """
    bound = method_callable(model, method, recipe)
    try:
        with torch.no_grad():
            return bound(*inputs)
    except Exception as exc:  # user code: whatever it raises is a problem with these inputs
        raise _input_error(recipe, model, method, inputs, exc) from exc


def check_runs(recipe: Recipe) -> None:
    """Run every method once, in order, on a model of its own with the example inputs.

    The model's first run, before export traces it: a model that cannot take the recipe's
    inputs fails here with a RecipeError rather than later in verify. A fresh model keeps
    mutable state (buffers) at its initial values for export.
    """
    model = build_model(recipe)
    for spec in recipe.model.methods:
        call_method(recipe, model, spec.name, example_inputs(recipe, spec.name))


def _input_error(
    recipe: Recipe, model: torch.nn.Module, method: str, inputs: tuple[torch.Tensor, ...], exc: Exception
) -> RecipeError:
    path = _inputs_path(recipe, method)
    problem = f"{method} raised {type(exc).__name__}: {_first_line(exc)}"
    specs = recipe.model.method(method).inputs
    for i, spec in enumerate(specs):
        for dtype in _other_dtypes(model, inputs[i].dtype):
            if _runs_with(recipe, method, inputs, i, dtype):
                message = f"expected a dtype the model takes; got {spec.dtype} ({problem}; it runs with {_name(dtype)})"
                return recipe.error((*path, i, "dtype"), message)
    return recipe.error(path, f"expected inputs the model takes; {problem}")


def _runs_with(
    recipe: Recipe, method: str, inputs: tuple[torch.Tensor, ...], index: int, dtype: torch.dtype
) -> bool:
    """Whether `method` of a fresh model runs once input `index` is random data of `dtype`."""
    spec = dataclasses.replace(recipe.model.method(method).inputs[index], dtype=_name(dtype), low=None, high=None)
    generator = torch.Generator().manual_seed(recipe.model.seed)
    changed = list(inputs)
    changed[index] = _random_tensor(spec, tuple(inputs[index].shape), generator)
    try:
        with torch.no_grad():
            method_callable(build_model(recipe), method, recipe)(*changed)
    except Exception:  # user code: any failure means this dtype does not help
        return False
    return True


def _inputs_path(recipe: Recipe, method: str) -> tuple[str, ...]:
    """The key path of a method's inputs: `model.inputs`, or `model.methods.<name>.inputs`."""
    in_methods = "methods" in recipe.section("model")
    return ("model", "methods", method, "inputs") if in_methods else ("model", "inputs")


def _other_dtypes(model: torch.nn.Module, dtype: torch.dtype) -> list[torch.dtype]:
    """The dtypes to try instead of `dtype`: the model's float dtype (that of its first floating
    parameter or buffer, else torch's default) and int64, those a recipe can name."""
    tensors = [*model.parameters(), *model.buffers()]
    float_dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.get_default_dtype())
    candidates = dict.fromkeys((float_dtype, torch.int64))
    return [d for d in candidates if d != dtype and d in TORCH_DTYPES.values()]


def _name(dtype: torch.dtype) -> str:
    return next(name for name, value in TORCH_DTYPES.items() if value == dtype)


def _own_methods(cls: type) -> list[str]:
    """Public methods that `cls` and its bases below torch.nn.Module define, sorted."""
    names = {
        name
        for base in cls.__mro__
        if issubclass(base, torch.nn.Module) and base is not torch.nn.Module
        for name, value in vars(base).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }
    return sorted(names)


def example_inputs(recipe: Recipe, method: str = "forward") -> tuple[torch.Tensor, ...]:
    """One input tuple for export at the declared shapes, the same on every call (`model.seed`)."""
    spec = recipe.model.method(method)
    generator = torch.Generator().manual_seed(recipe.model.seed)
    return tuple(_random_tensor(item, item.shape, generator) for item in spec.inputs)


def sample_inputs(
    recipe: Recipe, count: int, seed: int, method: str = "forward"
) -> list[tuple[torch.Tensor, ...]]:
    """`count` random input tuples: floats ~ N(0, 1), ints in [low, high), bools uniform.

    Each dynamic dimension has size `max` in sample 0 (so the upper bound is always exercised)
    and, in each later sample, a size drawn uniformly from [min, max], independently of the
    other dimensions. Without dynamic dimensions every sample has the declared shapes.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0; got {count}")
    spec = recipe.model.method(method)
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for index in range(count):
        shapes = _sample_shapes(spec, generator, largest=index == 0)
        samples.append(
            tuple(
                _random_tensor(item, shape, generator) for item, shape in zip(spec.inputs, shapes)
            )
        )
    return samples


def dynamic_shapes(recipe: Recipe, method: str = "forward") -> tuple[Any, ...] | None:
    """The `dynamic_shapes` argument of `torch.export.export` for `method`, or None if static.

    One entry per input: None, or `{dimension: torch.export.Dim(name, min=, max=)}`. Each
    dimension gets its own Dim (named `<method>_input<i>_dim<d>`), so no two are assumed equal.
    min=1 is passed as written: torch 2.13 accepts it (the range constraint reads [1, max]) and
    runs the program at size 1. What it cannot do is export from an example of size 0 or 1 (it
    specializes the dimension to that constant and fails), which is why the recipe requires the
    declared size of a dynamic dimension to be at least 2.
    """
    spec = recipe.model.method(method)
    if not spec.dynamic:
        return None
    return tuple(
        {
            dim: torch.export.Dim(f"{method}_input{index}_dim{dim}", min=bounds.min, max=bounds.max)
            for dim, bounds in spec.dynamic[index].items()
        }
        if index in spec.dynamic
        else None
        for index in range(len(spec.inputs))
    )


def _sample_shapes(
    spec: MethodSpec, generator: torch.Generator, largest: bool
) -> list[tuple[int, ...]]:
    """The inputs' shapes for one sample: dynamic sizes at their max, or drawn in [min, max]."""
    shapes = [list(item.shape) for item in spec.inputs]
    for index, dims in spec.dynamic.items():
        for dim, bounds in dims.items():
            if largest:
                shapes[index][dim] = bounds.max
            else:
                high = bounds.max + 1
                shapes[index][dim] = int(torch.randint(bounds.min, high, (), generator=generator))
    return [tuple(shape) for shape in shapes]


def _random_tensor(
    spec: InputSpec, shape: tuple[int, ...], generator: torch.Generator
) -> torch.Tensor:
    dtype = TORCH_DTYPES[spec.dtype]
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator, dtype=dtype)
    low = INT_LOW if spec.low is None else spec.low
    high = INT_HIGH if spec.high is None else spec.high
    return torch.randint(low, high, shape, generator=generator, dtype=dtype)


def _resolve_factory(recipe: Recipe) -> Callable[..., Any]:
    """The callable that `model.factory` names."""
    target, _, attributes = recipe.model.factory.rpartition(":")
    if target.endswith(".py"):
        owner: Any = _import_file(recipe, Path(target))
        owner_name = f"file {target}"
    else:
        owner = _import_module(recipe, target)
        owner_name = f"module '{target}'"
    for attribute in attributes.split("."):
        if not hasattr(owner, attribute):
            message = f"{owner_name} has no attribute '{attribute}'"
            raise recipe.error("model.factory", message + _did_you_mean(attribute, owner))
        owner, owner_name = getattr(owner, attribute), f"'{attribute}'"
    if not callable(owner):
        message = f"expected a callable; got {type(owner).__name__} '{recipe.model.factory}'"
        raise recipe.error("model.factory", message)
    return owner


def _did_you_mean(name: str, owner: Any) -> str:
    public = [attribute for attribute in dir(owner) if not attribute.startswith("_")]
    return did_you_mean(name, public)


def _import_module(recipe: Recipe, name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise recipe.error("model.factory", f"cannot import module '{name}': {exc}") from exc
    except Exception as exc:  # user code: whatever it raises is a problem with this recipe
        message = f"importing module '{name}' raised {type(exc).__name__}: {exc}"
        raise recipe.error("model.factory", message) from exc


def _import_file(recipe: Recipe, path: Path) -> ModuleType:
    """Execute a factory file as a fresh module named after a hash of its path."""
    if not path.is_file():
        raise recipe.error("model.factory", f"factory file {path} does not exist")
    name = "_etbuild_factory_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise recipe.error("model.factory", f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # user code: whatever it raises is a problem with this recipe
        del sys.modules[name]
        message = f"importing {path} raised {type(exc).__name__}: {exc}"
        raise recipe.error("model.factory", message) from exc
    return module


def _call_factory(
    recipe: Recipe, factory: Callable[..., Any], kwargs: dict[str, Any]
) -> torch.nn.Module:
    try:
        module = factory(**kwargs)
    except Exception as exc:  # user code: whatever it raises is a problem with this recipe
        message = f"calling {recipe.model.factory} raised {type(exc).__name__}: {exc}"
        raise recipe.error("model.factory", message) from exc
    if not isinstance(module, torch.nn.Module):
        message = f"expected the factory to return a torch.nn.Module; got {type(module).__name__}"
        raise recipe.error("model.factory", message)
    return module


def _load_weights(recipe: Recipe, module: torch.nn.Module, path: Path) -> None:
    """Load a state_dict file into `module`, strictly: same keys, same shapes."""
    if not path.is_file():
        raise recipe.error("model.weights", f"weights file {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises several unrelated types for a bad file
        message = f"cannot load {path}: {type(exc).__name__}: {_first_line(exc)}"
        raise recipe.error("model.weights", message) from exc
    if not isinstance(state, Mapping):
        message = f"expected a state_dict (names to tensors) in {path}; got {type(state).__name__}"
        raise recipe.error("model.weights", message)
    problem = _state_dict_mismatch(module.state_dict(), state)
    if problem:
        raise recipe.error("model.weights", f"{path} does not match the model: {problem}")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        message = f"{path} does not match the model: {_first_line(exc)}"
        raise recipe.error("model.weights", message) from exc


def _state_dict_mismatch(expected: Mapping[str, Any], given: Mapping[str, Any]) -> str:
    """Missing keys, unexpected keys and shape differences, or `` when the two agree."""
    problems = []
    missing = [key for key in expected if key not in given]
    unexpected = [key for key in given if key not in expected]
    if missing:
        problems.append("missing " + ", ".join(missing))
    if unexpected:
        problems.append("unexpected " + ", ".join(map(str, unexpected)))
    for key, tensor in expected.items():
        value = given.get(key)
        if isinstance(value, torch.Tensor) and value.shape != tensor.shape:
            problems.append(f"{key} has shape {list(value.shape)}, expected {list(tensor.shape)}")
    return "; ".join(problems)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
