"""Input setters: check a caller's input against the plan and put it where the plan wants it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.errors import MethodInputError
from etbuild.runtime import features
from etbuild.runtime.format import program as fb
from etbuild.runtime.tensor import numpy_dtype, resize
from etbuild.runtime.values import Values

Setter = Callable[[Any], None]


def input_setters(plan: fb.ExecutionPlan, values: Values) -> list[Setter]:
    """One setter per plan input, in order."""
    return [_setter(plan, values, k, i) for k, i in enumerate(plan.inputs)]


def _setter(plan: fb.ExecutionPlan, values: Values, k: int, i: int) -> Setter:
    v = plan.values[i].val
    where = f"input {k}"
    if isinstance(v, fb.Tensor):
        return _tensor_setter(v, values, i, where)
    if not features.SCALAR_INPUTS:
        raise features.missing("SCALAR_INPUTS", where)
    kinds = {fb.Int: (int,), fb.Double: (float, int), fb.Bool: (bool,)}
    for cls, accepted in kinds.items():
        if isinstance(v, cls):
            return _scalar_setter(values.setter(i), accepted, cls.__name__, where)
    raise MethodInputError(f"{where}: inputs of type {type(v).__name__} are not supported")


def _scalar_setter(store: Setter, accepted: tuple[type, ...], kind: str, where: str) -> Setter:
    def set_scalar(x: Any) -> None:
        if isinstance(x, np.generic):
            x = x.item()
        if not isinstance(x, accepted) or (bool not in accepted and isinstance(x, bool)):
            raise MethodInputError(f"{where}: expected {kind}, got {type(x).__name__}")
        store(accepted[0](x))

    return set_scalar


def _tensor_setter(t: fb.Tensor, values: Values, i: int, where: str) -> Setter:
    dtype = numpy_dtype(t.scalar_type)
    bound = tuple(t.sizes)
    dynamic = t.shape_dynamism != fb.TensorShapeDynamism.STATIC
    planned = t.allocation_info is not None
    if planned and not dynamic:  # the common case: copy into the planned view, which never changes
        dest = values.objects[i]

        def set_planned(x: Any) -> None:
            x = _as_array(x, dtype, where)
            _check_shape(x.shape, bound, False, where)
            np.copyto(dest, x)

        return set_planned
    if not features.LIVE_VALUES:
        raise features.missing("LIVE_VALUES", f"{where}, an unplanned or dynamic tensor,")
    store = values.setter(i)
    objects = values.objects
    held: list[np.ndarray] = []  # an unplanned input's own array, refilled while the shape stays

    def set_tensor(x: Any) -> None:
        x = _as_array(x, dtype, where)
        _check_shape(x.shape, bound, dynamic, where)
        if not planned:
            _set_unplanned(x, held, store)
            return
        dest = resize(objects[i], x.shape)
        store(dest)
        np.copyto(dest, x)

    return set_tensor


def _set_unplanned(x: np.ndarray, held: list[np.ndarray], store: Setter) -> None:
    """Copy an input without planned memory into an array of the method's own, the same one while its shape
    stays: steps bound to it stay bound (etbuild.runtime.steady), and the caller's array is never written."""
    if held and held[0].shape == x.shape:
        np.copyto(held[0], x)
        return
    held[:] = [np.array(x, order="C", copy=True)]
    store(held[0])


def _as_array(x: Any, dtype: np.dtype, where: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        if hasattr(x, "numpy"):
            x = x.numpy()  # a torch tensor, when the caller has torch
        else:
            raise MethodInputError(f"{where}: expected a {dtype} array, got {type(x).__name__}")
    if x.dtype != dtype:
        raise MethodInputError(f"{where}: expected dtype {dtype}, got {x.dtype}")
    return x


def _check_shape(shape: tuple[int, ...], bound: tuple[int, ...], dynamic: bool, where: str) -> None:
    if features.DYNAMIC_SHAPES and dynamic:
        if len(shape) != len(bound) or any(s > b for s, b in zip(shape, bound)):
            raise MethodInputError(
                f"{where}: shape {list(shape)} exceeds the upper bound {list(bound)} it was planned for"
            )
    elif shape != bound:
        raise MethodInputError(f"{where}: expected shape {list(bound)}, got {list(shape)}")
