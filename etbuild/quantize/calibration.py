"""The inputs a method is calibrated on: the arrays of `quantize.calibration.data`, or samples
drawn from the recipe's inputs (a language model's: token sequences, `etbuild.llm.calibration`, when
they reach the result: an int8-static module or GPTQ weights).

The `.npz` holds one array per input, named `in0`, `in1`, … (`<method>.in0`, … when the
recipe has several methods), each stacking the samples along a new leading axis: an input
declared `[1, 3, 96, 96]` float32 comes as `[N, 1, 3, 96, 96]` float32, every array with the
same N. A dynamic dimension may hold any size in its range. Anything else is a RecipeError at
`quantize.calibration.data` naming the array, the shape (or dtype) found and the one expected.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from etbuild.model import TORCH_DTYPES, sample_inputs
from etbuild.quantize.flow import GPTQ
from etbuild.quantize.schemes import INT4, STATIC
from etbuild.recipe import InputSpec, MethodSpec, Recipe
from etbuild.recipe.kinds import kind_of

DATA_KEY = "quantize.calibration.data"


def _calibrates(recipe: Recipe) -> bool:
    """Whether the calibration inputs reach the quantized model: an int8-static module's ranges, or the inputs
    GPTQ compensates its int4 linears on (a dynamic or weight-only scheme with rounded weights reads none)."""
    q = recipe.quantize
    schemes = (q.scheme, *(o.scheme for o in q.modules)) if q else ()
    return STATIC in schemes or (INT4 in schemes and q is not None and q.weights == GPTQ)


def calibration_inputs(recipe: Recipe, method: str) -> list[tuple[torch.Tensor, ...]]:
    """The calibration samples of one method, as input tuples."""
    cfg = recipe.quantize.calibration if recipe.quantize else None
    kind = kind_of(recipe)
    if kind.calibration is not None and (cfg is None or cfg.data is None) and _calibrates(recipe):
        return list(kind.calibration(recipe))
    if cfg is None or cfg.data is None:
        samples, seed = (cfg.samples, cfg.seed) if cfg else (1, 0)
        return sample_inputs(recipe, samples, seed, method)
    arrays = _read(recipe, cfg.data)
    spec = recipe.model.method(method)
    names = [array_name(recipe, method, k) for k in range(len(spec.inputs))]
    stacked = [_checked(recipe, name, arrays, item, _dynamic_dims(spec, k)) for k, (name, item) in
               enumerate(zip(names, spec.inputs))]
    counts = {len(a) for a in stacked}
    if len(counts) > 1:
        found = ", ".join(f"{n}: {len(a)}" for n, a in zip(names, stacked))
        raise recipe.error(DATA_KEY, f"{cfg.data}: expected the same number of samples in every array; got {found}")
    return [tuple(torch.from_numpy(np.ascontiguousarray(a[i])) for a in stacked) for i in range(counts.pop())]


def array_name(recipe: Recipe, method: str, index: int) -> str:
    """The `.npz` array that holds input `index` of `method`."""
    return f"in{index}" if len(recipe.model.methods) == 1 else f"{method}.in{index}"


def _read(recipe: Recipe, path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise recipe.error(DATA_KEY, f"calibration file {path} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise recipe.error(DATA_KEY, f"cannot read {path} as an .npz file: {exc}") from None


def _dynamic_dims(spec: MethodSpec, index: int) -> dict[int, Any]:
    return dict(spec.dynamic.get(index, {}))


def _checked(recipe: Recipe, name: str, arrays: dict[str, np.ndarray], item: InputSpec, dynamic: dict[int, Any]) -> Any:
    """The array `name`, checked against the input it stacks samples of."""
    path = recipe.quantize.calibration.data
    if name not in arrays:
        found = ", ".join(sorted(arrays)) or "none"
        raise recipe.error(DATA_KEY, f"{path}: expected an array {name!r}; the file has {found}")
    array = arrays[name]
    expected = "[N, " + ", ".join(_dim_text(d, s, dynamic) for d, s in enumerate(item.shape)) + "]"
    fits = array.ndim == len(item.shape) + 1 and len(array) > 0 and all(
        _fits(d, size, item.shape[d], dynamic) for d, size in enumerate(array.shape[1:]))
    if not fits:
        raise recipe.error(DATA_KEY, f"{path}: array {name!r} has shape {list(array.shape)}; expected {expected} "
                                     "(N >= 1 samples of the input)")
    want = TORCH_DTYPES[item.dtype]
    if torch.from_numpy(array[:0]).dtype != want:
        raise recipe.error(DATA_KEY, f"{path}: array {name!r} has dtype {array.dtype}; expected {item.dtype}")
    return array


def _fits(dim: int, size: int, declared: int, dynamic: dict[int, Any]) -> bool:
    bounds = dynamic.get(dim)
    return bounds.min <= size <= bounds.max if bounds is not None else size == declared


def _dim_text(dim: int, declared: int, dynamic: dict[int, Any]) -> str:
    bounds = dynamic.get(dim)
    return f"{bounds.min}..{bounds.max}" if bounds is not None else str(declared)
