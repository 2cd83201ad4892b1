"""Turns a plan's EValues into Python objects: tensors become numpy views, zero copy.

A constant tensor is a read-only view of the mapped constant segment; a planned tensor is a
view of its arena; a tensor with neither is supplied by the caller at run time (None until
then) when it is a method input, and gets memory of its own at load when it is a method
output (as ExecuTorch's runtime gives unplanned outputs a buffer). Every offset and size is
checked against the memory it points into.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from etbuild.errors import InvalidData, InvalidProgram
from etbuild.runtime import features
from etbuild.runtime.data_files import is_external
from etbuild.runtime.format import program as fb
from etbuild.runtime.tensor import bounded, numpy_dtype

MAX_RANK = 16
LIST_TYPES = (fb.IntList, fb.TensorList, fb.OptionalTensorList)  # lists of value indices
# Without VALUE_LISTS, a trimmed runtime's reader rejects list values: its schema lacks their tables.


@dataclass
class ConstantData:
    """Where constant and initial-state tensor bytes come from."""

    constant_buffers: list[memoryview]  # by data_buffer_idx; entry 0 unused
    mutable_buffers: list[memoryview]  # by data_buffer_idx for mutable_data_segments[0]
    # EXTERNAL tensors' bytes (tensor, byte size, where -> checked view): etbuild.runtime.data_files
    external: Callable[[fb.Tensor, int, str], memoryview] | None = None


def tensor_nbytes(t: fb.Tensor, where: str) -> tuple[np.dtype, int]:
    """The dtype and byte size of a tensor, after checking its sizes and dim_order."""
    dtype = numpy_dtype(t.scalar_type)
    if len(t.sizes) > MAX_RANK:
        raise InvalidProgram(f"{where}: rank {len(t.sizes)} exceeds {MAX_RANK}")
    if any(s < 0 for s in t.sizes):
        raise InvalidProgram(f"{where}: negative size in {list(t.sizes)}")
    order = list(t.dim_order)
    if sorted(order) != list(range(len(t.sizes))):
        raise InvalidProgram(f"{where}: dim_order {order} is not a permutation of {len(t.sizes)} dims")
    if t.storage_offset != 0:
        raise InvalidProgram(f"{where}: storage_offset {t.storage_offset} is not 0")
    count = 1
    for s in t.sizes:
        count *= s
    return dtype, count * dtype.itemsize


def _shaped(flat: np.ndarray, dtype: np.dtype, t: fb.Tensor, where: str) -> np.ndarray:
    """View flat bytes as the tensor's logical shape, honouring a non-default dim_order."""
    sizes = tuple(t.sizes)
    order = list(t.dim_order) or list(range(len(sizes)))
    if order == sorted(order):
        if t.shape_dynamism != fb.TensorShapeDynamism.STATIC:
            if not features.DYNAMIC_SHAPES:
                raise features.missing("DYNAMIC_SHAPES", where)
            if t.shape_dynamism != fb.TensorShapeDynamism.DYNAMIC_BOUND:  # as ExecuTorch: unbounded is unsupported
                raise InvalidProgram(f"{where}: shape_dynamism {t.shape_dynamism} is neither static nor bounded")
            return bounded(flat, dtype, sizes)
        return flat.view(dtype).reshape(sizes)
    if not features.DIM_ORDER:
        raise features.missing("DIM_ORDER", where)
    physical = flat.view(dtype).reshape([sizes[d] for d in order])
    return physical.transpose(np.argsort(order))


def _check_range(total: int, offset: int, nbytes: int, where: str, what: str) -> None:
    if offset < 0 or offset + nbytes > total:
        raise InvalidProgram(f"{where}: {nbytes} bytes at offset {offset} run past the {total}-byte {what}")


def _const_bytes(buf: memoryview, nbytes: int, where: str, what: str) -> np.ndarray:
    _check_range(len(buf), 0, nbytes, where, what)
    return np.frombuffer(buf, dtype=np.uint8, count=nbytes)


def unplanned_outputs(plan: fb.ExecutionPlan) -> dict[int, int]:
    """The outputs that are tensors with no memory of their own, and their bytes (allocated at load).
    Output indices out of range are left to the caller's check."""
    out = {}
    for i in set(plan.outputs) - set(plan.inputs):
        t = plan.values[i].val if 0 <= i < len(plan.values) else None
        if not isinstance(t, fb.Tensor) or t.allocation_info is not None or t.data_buffer_idx:
            continue
        if not (features.EXTERNAL_DATA and is_external(t)):  # off: the runtime never reads extra_tensor_info
            out[i] = tensor_nbytes(t, f"output value {i}")[1]
    return out


def make_tensor(t: fb.Tensor, arenas: list[np.ndarray], consts: ConstantData, where: str, own: bool = False) -> Any:
    """The numpy array for one tensor value (None for a run-time supplied input; new memory when `own`)."""
    dtype, nbytes = tensor_nbytes(t, where)
    alloc = t.allocation_info
    external = _external(t, nbytes, consts, where) if features.EXTERNAL_DATA and is_external(t) else None
    if alloc is None:
        if external is not None:
            return _shaped(np.frombuffer(external, dtype=np.uint8, count=nbytes), dtype, t, where)
        if t.data_buffer_idx == 0:
            return _shaped(np.zeros(nbytes, np.uint8), dtype, t, where) if own else None
        if not features.EXTERNAL_DATA and t.data_buffer_idx >= len(consts.constant_buffers):
            # the tensor's location is not read without the feature: most likely a constant in a .ptd
            raise features.missing("EXTERNAL_DATA", f"{where}: data_buffer_idx {t.data_buffer_idx} is past the "
                                   "program's constant buffers; if the constant lives in a .ptd data file, it")
        buf = _pick(consts.constant_buffers, t.data_buffer_idx, where, "constant buffer")
        return _shaped(_const_bytes(buf, nbytes, where, "constant buffer"), dtype, t, where)
    if not 1 <= alloc.memory_id <= len(arenas):
        raise InvalidProgram(f"{where}: memory_id {alloc.memory_id} has no planned buffer")
    arena = arenas[alloc.memory_id - 1]
    offset = alloc.memory_offset_low | alloc.memory_offset_high << 32
    _check_range(arena.nbytes, offset, nbytes, where, f"planned buffer {alloc.memory_id}")
    flat = arena[offset : offset + nbytes]
    if external is not None:  # a mutable tensor's initial state, copied in (as ExecuTorch's load_data_into)
        flat[:] = np.frombuffer(external, dtype=np.uint8, count=nbytes)
    elif t.data_buffer_idx:
        if not features.MUTABLE_STATE:
            raise features.missing("MUTABLE_STATE", where)
        init = _pick(consts.mutable_buffers, t.data_buffer_idx, where, "mutable data")
        flat[:] = _const_bytes(init, nbytes, where, "mutable data")
    return _shaped(flat, dtype, t, where)


def _external(t: fb.Tensor, nbytes: int, consts: ConstantData, where: str) -> memoryview:
    if consts.external is None:
        key = t.extra_tensor_info.fully_qualified_name if t.extra_tensor_info else None
        raise InvalidData(f"{where}: constant {key!r} lives in a .ptd data file; load the program with data=[...]")
    return consts.external(t, nbytes, where)


def _pick(buffers: list[memoryview], idx: int, where: str, what: str) -> memoryview:
    if not 0 < idx < len(buffers):
        raise InvalidProgram(f"{where}: data_buffer_idx {idx} has no {what} ({len(buffers)} entries)")
    return buffers[idx]


def materialize(
    plan: fb.ExecutionPlan, arenas: list[np.ndarray], consts: ConstantData, owned: Container[int] = ()
) -> list[Any]:
    """Python objects for every value of a plan; lists refer to the objects they hold.

    owned: tensor values with no memory in the plan that get memory of their own here.
    """
    vals: list[Any] = [None] * len(plan.values)
    lists: list[int] = []
    for i, ev in enumerate(plan.values):
        v, where = ev.val, f"value {i}"
        if isinstance(v, fb.Tensor):
            vals[i] = make_tensor(v, arenas, consts, where, i in owned)
        elif isinstance(v, (fb.Int, fb.Bool, fb.Double, fb.String)):
            vals[i] = _scalar(v)
        elif features.VALUE_LISTS and isinstance(v, LIST_TYPES):
            lists.append(i)
        elif features.VALUE_LISTS and isinstance(v, (fb.DoubleList, fb.BoolList)):
            vals[i] = list(v.items)
        elif not isinstance(v, fb.Null) and v is not None:
            raise InvalidProgram(f"{where}: unsupported value type {type(v).__name__}")
    if features.VALUE_LISTS:
        for i in lists:
            vals[i] = [vals[j] if j >= 0 else None for j in list_items(plan, i)]
    return vals


def _scalar(v: Any) -> Any:
    if isinstance(v, fb.Int):
        return int(v.int_val)
    if isinstance(v, fb.Bool):
        return bool(v.bool_val)
    if isinstance(v, fb.Double):
        return float(v.double_val)
    return v.string_val


def list_items(plan: fb.ExecutionPlan, i: int) -> list[int]:
    """The value indices a list value refers to, checked: in range and of the list's item type
    (an IntList holds Int values, a TensorList tensors, an OptionalTensorList tensors, Nulls or -1)."""
    values = plan.values
    v = values[i].val
    n = len(values)
    optional = isinstance(v, fb.OptionalTensorList)
    item_type = fb.Int if isinstance(v, fb.IntList) else fb.Tensor
    items = [int(j) for j in v.items]
    for j in items:
        if optional and j == -1:
            continue
        if not 0 <= j < n:
            raise InvalidProgram(f"value {i}: list item {j} is not a value index (0..{n - 1})")
        item = values[j].val
        if not isinstance(item, item_type) and not (optional and isinstance(item, (fb.Null, type(None)))):
            raise InvalidProgram(
                f"value {i}: item {j} of this {type(v).__name__} is a {type(item).__name__}, "
                f"expected {item_type.__name__}"
            )
    return items


class Values:
    """The live values of one loaded method and the lists that must follow their changes."""

    def __init__(self, plan: fb.ExecutionPlan, objects: list[Any]) -> None:
        self.plan = plan
        self.objects = objects
        self.watchers: dict[int, list[Any]] = {}  # value -> the steps to mark dirty when it changes (see watch)
        self.dependents: dict[int, list[tuple[list[Any], int]]] = {}
        if not (features.LIVE_VALUES and features.VALUE_LISTS):
            return
        for i, ev in enumerate(plan.values):
            if isinstance(ev.val, LIST_TYPES):
                for pos, j in enumerate(list_items(plan, i)):
                    if j >= 0:
                        self.dependents.setdefault(j, []).append((objects[i], pos))

    def watch(self, indices: Iterable[int], step: Any) -> None:
        """Set `step.dirty = True` whenever one of these values gets another object (etbuild.runtime.steady: a
        step that is not dirty still sees the objects it last checked)."""
        for i in set(indices):
            self.watchers.setdefault(i, []).append(step)

    def setter(self, i: int) -> Callable[[Any], None]:
        """A function that stores a new object for value i (and in every list holding it), marking the steps
        that watch value i dirty when it is another object than the one there."""
        if not features.LIVE_VALUES:
            raise features.missing("LIVE_VALUES", f"value {i}")
        objects, deps, watchers = self.objects, self.dependents.get(i, []), self.watchers.setdefault(i, [])

        def store(obj: Any) -> None:
            if objects[i] is not obj:
                objects[i] = obj
                for step in watchers:
                    step.dirty = True
            for lst, pos in deps:
                lst[pos] = obj

        return store


def holds_data(v: Any) -> bool:
    """A tensor whose values the program's constant data or a data file holds (with `features.EXTERNAL_DATA`)."""
    return isinstance(v, fb.Tensor) and (v.data_buffer_idx > 0 or features.EXTERNAL_DATA and is_external(v))


def is_constant(v: Any) -> bool:
    """A tensor in the constant data (read-only: mapped from the file or a data file), not planned state."""
    return holds_data(v) and v.allocation_info is None
