"""Layout copies turned into views at load, where the memory plan allows it.

A program in ExecuTorch's format copies for every view_copy, slice_copy, squeeze_copy or
split_with_sizes_copy: each result has planned memory of its own. Our runtime may instead
make the result's array a view of the input's storage and drop the instruction, when that
cannot change what any instruction reads. For result `o` of the layout copy at pc, reading
the storage of its input's root `r` (the value that owns the memory, through earlier
aliases), that holds when:

- `o` is a static planned tensor, not a method input or output, whose only writer is this
  instruction and which nothing touches before it;
- the view (the kernel's `view`, see etbuild.runtime.kernel_registry) has `o`'s shape and dtype, is
  C-contiguous and shares memory with the input (a copy made at load would go stale);
- from pc to the last instruction that touches `o`, nothing writes `r`, and no other value
  whose planned bytes overlap `r`'s or `o`'s is touched (a reuse of `r`'s memory, or a value
  the plan placed over `o`'s bytes, would see different data);
- no other value that shares `o`'s planned bytes is read after pc before something writes it
  (ExecuTorch plans a view as a second tensor over the same bytes, with no instruction), and
  no method output shares them.

The other way round, a copy that would copy its input `s` whole and in order (an expand or view
to s's own shape: ExecuTorch leaves such expand_copy before a delegate's batched product) is
dropped by giving `s` the out's array, so that s's writer writes o's bytes, when (checked
before any instruction is bound, since the writer may come first and keep the array it gets):

- `s` and `o` are static planned tensors, neither a method input or output nor a list's item,
  `s` written by one instruction w that touches it first and last read by this copy, `o`
  written only by it and touched first by it, `s` not itself an out that took its input so;
- nothing but `s` and `o` whose planned bytes overlap o's is touched from w to the copy (after
  it, o's bytes hold o's numbers either way);
- no other value over s's planned bytes is read after w before something writes it (one that
  read s's numbers there without an instruction would see stale ones).

A chain with jumps or moves is left alone. A layout copy that cannot become a view still gets
a fast step: its view computed once at load, copied by one `np.copyto` per call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from etbuild.errors import KernelError
from etbuild.runtime import checks, features
from etbuild.runtime.format import program as fb
from etbuild.runtime.values import tensor_nbytes

Region = tuple[int, int, int]  # memory id, first byte, end byte
BAD_ARGS = (KernelError, ValueError, IndexError, TypeError)  # the kernel itself will say what is wrong


def views_of(info: Any, args: Sequence[Any]) -> list[np.ndarray] | None:
    """The views a layout-copy kernel copies into its out(s), computed now; None if it has none."""
    if info.view is None:
        return None
    try:
        views = info.view(*args)
    except BAD_ARGS:
        return None
    views = views if isinstance(views, list) else [views]
    outs = args[-1] if isinstance(args[-1], list) else [args[-1]]
    if len(views) != len(outs) or not all(_is_view(v, args[0]) for v in views):
        return None
    return views


def _is_view(v: Any, source: Any) -> bool:
    return isinstance(v, np.ndarray) and (v.size == 0 or np.may_share_memory(v, source))


def copy_step(views: list[np.ndarray], outs: list[np.ndarray]) -> Callable[[], Any] | None:
    """One `np.copyto` per out from its view bound at load (what `store` does when shapes match)."""
    if any(type(o) is not np.ndarray or o.shape != v.shape for o, v in zip(outs, views)):
        return None
    copies = [_copy(o, v) for o, v in zip(outs, views)]
    if len(copies) == 1:
        return copies[0]

    def copy_all() -> None:
        for copy in copies:
            copy()

    return copy_all


def _copy(out: np.ndarray, view: np.ndarray) -> Callable[[], Any]:
    """np.copyto(out, view), asking for unsafe casting only when the dtypes differ (the keyword costs)."""
    if out.dtype == view.dtype:
        return functools.partial(np.copyto, out, view)
    return functools.partial(np.copyto, out, view, casting="unsafe")


class Aliaser:
    """Finds the layout copies of one straight-line chain that can be views (see the module docstring)."""

    def __init__(self, plan: fb.ExecutionPlan, instructions: list[fb.Instruction], objects: list[Any],
                 kernel: Callable[[fb.KernelCall], Any], rebound: set[int],
                 delegate_writes: Callable[[Any], set[int] | None] | None = None) -> None:
        """kernel: the KernelInfo of a call (None when it has none; binding reports that); delegate_writes: the
        values a delegate call writes, its handle's outputs (None when unknown: then every tensor it gets)."""
        self.plan, self.objects, self.kernel, self.delegate_writes = plan, objects, kernel, delegate_writes
        self._regions: dict[int, Region | None] = {}
        self.touched = [set(checks.touched(plan, ins.instr_args)) for ins in instructions]
        self.writes = [self._written(ins.instr_args) for ins in instructions]
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.uses: dict[int, list[int]] = {}
        for pc, t in enumerate(self.touched):
            for i in t:
                self.first.setdefault(i, pc)
                self.last[i] = pc
                self.uses.setdefault(i, []).append(pc)
        self.writers: dict[int, set[int]] = {}
        for pc, w in enumerate(self.writes):
            for i in w:
                self.writers.setdefault(i, set()).add(pc)
        self.end = len(instructions)  # where the outputs are read
        for i in plan.outputs:
            self.uses.setdefault(i, []).append(self.end)
        regions = {i: r for i in self.uses if (r := self._region(i)) is not None}
        self.region_values = np.array(list(regions), dtype=np.int64)
        self.region_bounds = np.array(list(regions.values()), dtype=np.int64).reshape(-1, 3)
        self.fixed = {i for i in range(len(plan.values)) if i not in rebound} - set(plan.inputs) - set(plan.outputs)
        self.root: dict[int, int] = {}
        self.viewed: dict[int, list[int]] = {}  # a dynamic out that may view its input: where its numbers may be
        self.holders: dict[int, list[tuple[int, int]]] = {}
        if features.VALUE_LISTS:
            for i, ev in enumerate(plan.values):
                if isinstance(ev.val, (fb.TensorList, fb.OptionalTensorList)):
                    for k, j in enumerate(ev.val.items):
                        self.holders.setdefault(j, []).append((i, k))
        self.moved: set[int] = set()  # the pcs of layout copies whose input was moved into their out's bytes
        self.movers: set[int] = set()  # the outs that took their input's numbers so
        for pc, ins in enumerate(instructions):
            if isinstance(ins.instr_args, fb.KernelCall):
                self._try_move(pc, ins.instr_args)

    def _written(self, a: Any) -> set[int]:
        """The values an instruction may write: its result slot (a list's items), its first argument
        when it has no result slot or is an in-place op (`copy_`), the arguments its kernel says it writes in place
        (`mutates`: `update_cache`'s cache); a delegate's outputs (every tensor it gets when its handle is not
        known)."""
        if features.DELEGATES and isinstance(a, fb.DelegateCall) and self.delegate_writes is not None:
            outs = self.delegate_writes(a)
            if outs is not None:
                return outs
        if not isinstance(a, fb.KernelCall):
            return set(checks.touched(self.plan, a))
        info = self.kernel(a)
        if info is None:
            return set(a.args)
        nparams = len(info.params)
        if len(a.args) not in (nparams, nparams + 1):
            return set(a.args)  # a malformed call (binding refuses it): it may write anything it names
        out = set(_items(self.plan, a.args[nparams])) if len(a.args) > nparams else set()
        if len(a.args) <= nparams or info.name.partition(".")[0].endswith("_"):
            out.add(a.args[0])
        return out | {a.args[i] for i in info.mutates}

    def try_alias(self, pc: int, call: fb.KernelCall, info: Any, views: list[np.ndarray]) -> bool:
        """Make the outs of the layout copy at pc views of its input when that is safe (see the module)."""
        if pc in self.moved:
            return True
        if len(call.args) <= len(info.params):
            return False  # no result slot: the copy stays a copy
        outs = _items(self.plan, call.args[len(info.params)])
        src = call.args[0]
        root = self.root.get(src, src)
        if not all(self._can_alias(pc, o, v, root) for o, v in zip(outs, views)):
            return False
        for o, v in zip(outs, views):
            self.objects[o] = v
            for holder, k in self.holders.get(o, []):
                self.objects[holder][k] = v
            self.root[o] = root
        return True

    def may_view(self, pc: int, call: fb.KernelCall, info: Any) -> bool:
        """Whether the one out of the layout copy at pc, a dynamically shaped tensor, may hold a view of its input
        instead of a copy (steady.Rebinding decides at run time, when the view is C-contiguous of out's dtype):
        the conditions of the module docstring on the planned bytes (a dynamic tensor's bound), for every memory
        the input's numbers may be in (its own, or, when it may be such a view itself, its input's; a method
        input's array, which only the caller's copy writes); never for a method input or output."""
        nparams = len(info.params)
        if len(call.args) != nparams + 1 or call.args[nparams] != call.args[nparams - 1]:
            return False
        o, src = call.args[nparams], call.args[0]
        if o in self.plan.inputs or o in self.plan.outputs or o in self.holders:
            return False
        own, owners = self._region(o), self.viewed.get(src, [self.root.get(src, src)])
        if own is None or self.first.get(o) != pc or self.writers.get(o) != {pc} or self._read_over(o, own, pc):
            return False
        for r in owners:
            source = self._region(r)
            if (source is None and r not in self.plan.inputs) or not self._untouched(pc, o, r, own, source):
                return False
        self.viewed[o] = [o, *owners]
        return True

    def _untouched(self, pc: int, o: int, root: int, own: Region | None, source: Region | None) -> bool:
        """From pc to o's last use, nothing writes root, and no other value over o's or root's bytes is touched."""
        for q in range(pc + 1, self.last[o] + 1):
            if root in self.writes[q]:
                return False
            for v in self.touched[q]:
                if v == o or self.root.get(v, v) == root:
                    continue
                mine = self._region(v) if v not in self.root else None
                if _overlap(mine, own) or _overlap(self._region(self.root.get(v, v)), source):
                    return False
        return True

    def _try_move(self, pc: int, call: fb.KernelCall) -> None:
        """Give the input of the layout copy at pc its out's array when the copy would copy it whole and in order
        (an expand or view to its own shape), so that its writer writes the out's bytes and the copy is dropped (see
        the module)."""
        info = self.kernel(call)
        nparams = len(info.params) if info is not None else 0
        if info is None or info.view is None or len(call.args) != nparams + 1 or call.args[-1] != call.args[-2]:
            return
        s, o = call.args[0], call.args[-1]
        obj, out = self.objects[s], self.objects[o]
        if type(obj) is not np.ndarray or type(out) is not np.ndarray or s == o or s in self.movers:
            return
        views = views_of(info, [self.objects[i] for i in call.args[:nparams]])
        if views is None or len(views) != 1 or not _whole(views[0], obj, out):
            return
        writers, own, source = self.writers.get(s, set()), self._region(o), self._region(s)
        if {s, o} - self.fixed or s in self.holders or o in self.holders or len(writers) != 1 or own is None \
                or source is None or self.last.get(s) != pc or self.first.get(o) != pc or self.writers.get(o) != {pc}:
            return
        w = next(iter(writers))  # not pop(): the writers set is the aliaser's own, read again later
        if self.first.get(s) != w or self._read_over(s, source, w):
            return
        for q in range(w, pc + 1):
            if any(v not in (s, o) and _overlap(self._region(v), own) for v in self.touched[q]):
                return
        self.objects[s] = out
        self._regions[s] = own
        self.region_bounds[self.region_values == s] = own
        self.moved.add(pc)
        self.movers.add(o)

    def _can_alias(self, pc: int, o: int, view: np.ndarray, root: int) -> bool:
        obj = self.objects[o]
        if o not in self.fixed or self.first.get(o) != pc or not isinstance(obj, np.ndarray):
            return False
        if view.shape != obj.shape or view.dtype != obj.dtype or not view.flags.c_contiguous:
            return False
        own, source = self._region(o), self._region(root)
        if own is None or self.writers.get(o) != {pc} or self._read_over(o, own, pc):
            return False
        return self._untouched(pc, o, root, own, source)

    def _read_over(self, o: int, own: Region, pc: int) -> bool:
        """Whether another value over o's planned bytes is read after pc before anything writes it."""
        b = self.region_bounds
        hits = self.region_values[(b[:, 0] == own[0]) & (b[:, 1] < own[2]) & (own[1] < b[:, 2])]
        for v in hits.tolist():
            later = [q for q in self.uses[v] if q > pc]
            if v != o and later and later[0] not in self.writers.get(v, ()):
                return True
        return False

    def _region(self, i: int) -> Region | None:
        """The planned bytes of a tensor value (None: constant, caller-supplied or not a tensor)."""
        if i not in self._regions:
            t = self.plan.values[i].val
            a = t.allocation_info if isinstance(t, fb.Tensor) else None
            lo = 0 if a is None else a.memory_offset_low | a.memory_offset_high << 32
            self._regions[i] = None if a is None else (a.memory_id, lo, lo + tensor_nbytes(t, f"value {i}")[1])
        return self._regions[i]


def _whole(view: np.ndarray, source: np.ndarray, out: np.ndarray) -> bool:
    """Whether the view is the source's bytes in order (strides equal where an extent is over 1), of the out's shape
    and dtype (both C-contiguous)."""
    return view.shape == source.shape == out.shape and view.dtype == source.dtype == out.dtype \
        and all(a == b for a, b, n in zip(view.strides, source.strides, view.shape) if n > 1) \
        and source.flags.c_contiguous and out.flags.c_contiguous \
        and view.__array_interface__["data"][0] == source.__array_interface__["data"][0]


def _overlap(a: Region | None, b: Region | None) -> bool:
    return a is not None and b is not None and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def _items(plan: fb.ExecutionPlan, ret: int) -> list[int]:
    v = plan.values[ret].val
    if features.VALUE_LISTS and isinstance(v, (fb.TensorList, fb.OptionalTensorList)):
        return [j for j in v.items if j >= 0]
    return [ret]
