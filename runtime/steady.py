"""Steps of calls whose arguments change identity at run time, bound again when they change.

A dynamically shaped program (export_llm's: one `forward` for any token count) gets no load-time fast path: its
tensors are new views whenever their shapes change, and numbers computed at run time (sizes) feed its calls. In a
steady state, though (a decode step after a decode step), each call sees the very arrays and the same numbers as at
its previous call. The step made here remembers them. When a call's varying arguments are those of its previous
call (arrays by identity, numbers and int lists by value; a kernel's `live` numbers, which its fast path reads at
each call, not compared), it runs a step bound to them: the layout copy's view
copied by one `np.copyto`, the kernel's fast path, or nothing for a view kernel (`et_view`), whose result from the
previous call still stands. Otherwise it calls the kernel as before (which checks and resizes), stores the result
and binds again for the next call. The bound step computes exactly what the kernel computes on those arguments
(the fast paths' own contract), so results do not change, only the cost of the steady call.

Whether the arguments are the previous call's is known without looking while a step is not dirty: the method's
values mark the steps that read a value dirty when it gets another object (Values.watch), and a steady call stores
none. A layout copy whose out the plan lets hold a view of its input stores that view instead (aliasing), and a
delegate call runs its handle's bound steps alone (DelegateCall).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from etbuild.runtime import aliasing
from etbuild.runtime.kernel_registry import KernelInfo
from etbuild.runtime.steps import Step

TENSOR_KINDS = "Tt"
LIST_KINDS = "LPNM"
SCALAR_KINDS = "ijpfgbczy"
Store = Callable[[Any], None]


def applies(info: KernelInfo) -> bool:
    """Whether a call of this kernel can be bound to its arguments: it returns a tensor, takes no tensor
    lists, and has something cheaper to bind than itself (a view, a fast path, or a pure view result)."""
    params, _, result = info.kinds.partition(">")
    simple = all(k in TENSOR_KINDS + LIST_KINDS + SCALAR_KINDS for k in params)
    return result == "T" and simple and (info.view is not None or info.fast is not None or info.pure)


class Rebinding:
    """The step of one call (see the module docstring); `binds` counts the times its arguments changed. `dirty`:
    whether a varying argument (or a number in an int list) may have another object since the key was last taken
    (the method's values set it: Values.watch); while it is not, the arguments are known to be the same. A call
    whose arguments change at two calls in a row (a slice at the position) runs its kernel, and binds once they
    hold still for a call."""

    __slots__ = ("info", "objects", "arg_idx", "store", "tensors", "key", "seen", "held", "bound", "binds", "dirty",
                 "may_view", "planned", "viewing", "changed", "unbound", "live")

    def __init__(self, info: KernelInfo, objects: list[Any], arg_idx: Sequence[int], kinds: str, varying: set[int],
                 ret: int | None, store: Store | None, may_view: bool = False) -> None:
        """varying: the argument values (or lists holding values) whose object or items may change at run time;
        the others are the same objects for the method's life. ret: the result value, store: what stores it.
        may_view: a layout copy whose out (its last argument and result) may hold the view of its input instead of
        a copy (aliasing.Aliaser.may_view): when the view is C-contiguous of out's dtype, that view is stored and
        the call does nothing while its arguments stay the same; the kernel still writes the planned out."""
        self.info, self.objects, self.arg_idx, self.store = info, objects, list(arg_idx), store
        tensors = sorted({i for i, k in zip(arg_idx, kinds) if k in TENSOR_KINDS and i in varying})
        self.live = {p: i for p, i in enumerate(arg_idx) if p in info.live and kinds[p] == "i" and i in varying}
        others = sorted({i for p, (i, k) in enumerate(zip(arg_idx, kinds))
                         if k not in TENSOR_KINDS and i in varying and p not in self.live})
        if info.pure and ret is not None:
            tensors.append(ret)  # the result value must still hold the previous call's view
        self.tensors = tensors
        self.key = key_of(objects, tensors, others)
        self.seen: Any = None  # the key of the arguments bound to, lists copied
        self.held: list[Any] = []  # the arrays it holds: alive, so that no new array can take an id in `seen`
        self.bound: Step | None = None
        self.binds = 0
        self.dirty = True
        self.may_view, self.viewing = may_view and store is not None, info.pure
        self.changed = self.unbound = False  # its arguments changed at its last call; it is not bound to them
        self.planned: Any = objects[self.arg_idx[-1]] if self.may_view else None  # the out's own (planned) array

    def __call__(self) -> None:
        same = not self.dirty or self.key() == self.seen
        if same:
            self.dirty = self.changed = False
            if self.bound is not None:
                self.bound()
                return
            if self.viewing:
                return
        objects = self.objects
        args = [objects[i] for i in self.arg_idx]
        if self.planned is not None:
            args[-1] = self.planned  # never the view it stored: the kernel writes the out's own memory
        result = self.info.fn(*args)
        if self.planned is not None:
            self.planned = result  # resized: the next call of this shape gets the same array again
        if self.store is not None:
            self.store(result)  # a new object marks this step dirty (when it watches its result)
        if same:
            if self.unbound:  # its arguments hold still again: bind now
                self._bind(result)
            return
        self.binds += 1
        if self.changed:  # changed at the call before too (a position): the kernel runs until they hold still
            self.bound, self.viewing, self.unbound = None, self.info.pure, True
        else:  # bind again (when nothing is cheaper for these arguments, the kernel runs until they change)
            self._bind(result)
        self.changed = True
        self.held = [objects[i] for i in self.tensors]
        key = self.key()
        self.seen = tuple(list(k) if isinstance(k, list) else k for k in key) if isinstance(key, tuple) else key
        self.dirty = False

    def _bind(self, result: Any) -> None:
        """What later calls with these arguments run: the bound step, or the stored view of a layout copy."""
        self.unbound = False
        args = [self.objects[i] for i in self.arg_idx]
        for p, i in self.live.items():  # read by the fast path at each call (KernelInfo.live)
            args[p] = functools.partial(list.__getitem__, self.objects, i)
        self.bound = _bound(self.info, args)
        if self.planned is not None:
            self._view(result)

    def _view(self, result: Any) -> None:
        """Store the view of the input in place of the copy the kernel made, when it has out's shape and dtype and
        is C-contiguous (what readers of a copy may assume); then the call does nothing until its arguments
        change."""
        views = aliasing.views_of(self.info, [self.objects[i] for i in self.arg_idx[:-1]] + [result])
        view = views[0] if views is not None and len(views) == 1 else None
        self.viewing = view is not None and view.flags.c_contiguous and view.dtype == result.dtype \
            and view.shape == result.shape
        if self.viewing and self.store is not None:
            self.store(view if type(view) is np.ndarray else view.view(np.ndarray))
            self.bound = None


def key_of(objects: list[Any], tensors: list[int], others: list[int]) -> Callable[[], Any]:
    """What identifies a call's varying arguments now: the ids of its arrays (by identity: an array's shape and
    memory are fixed for its life) and the values of its numbers and int lists."""
    if not tensors and not others:
        return tuple
    if len(tensors) == 1 and not others:
        (t,) = tensors
        return lambda: id(objects[t])
    if len(tensors) == 2 and not others:
        t, u = tensors
        return lambda: (id(objects[t]), id(objects[u]))

    def key() -> tuple[Any, ...]:
        return (*[id(objects[i]) for i in tensors], *[objects[i] for i in others])

    return key


def _bound(info: KernelInfo, args: list[Any]) -> Step | None:
    """What a call with exactly these arguments runs instead of the kernel: nothing for a pure view, one copy per
    out for a layout copy, the kernel's fast path; None when it has none for them. Resizable (bounded) arrays are
    given as plain views of the same memory: their shapes cannot change while the arguments stay the same."""
    if info.pure:
        return None
    args = [_plain(a) for a in args]
    views = aliasing.views_of(info, args)
    if views is not None:
        return aliasing.copy_step(views, args[-1] if isinstance(args[-1], list) else [args[-1]])
    try:
        return info.fast(*args) if info.fast is not None else None
    except aliasing.BAD_ARGS:
        return None


def _plain(x: Any) -> Any:
    """A resizable (bounded) array as a plain ndarray view of the same memory; anything else as it is."""
    return x.view(np.ndarray) if isinstance(x, np.ndarray) and type(x) is not np.ndarray else x


class DelegateCall:
    """The step of one delegate call: the handle's steady step while the call's arrays stay the same objects.

    A full call builds the tuple of the call's arrays, executes the handle on it and stores the outputs it resized.
    When that stored nothing new (the outputs are the arrays passed), the next call with the very same objects
    passes the very same tuple, so the handle's `steady(args)` (when it has one) is run instead: its bound steps
    alone, no argument checks, no tuple, no stores, under the method's floating-point guard. Whether the objects
    are the same is known without a key while the step is not `dirty` (see Rebinding). `binds` counts the full
    calls.
    """

    __slots__ = ("handle", "objects", "args", "stores", "key", "seen", "held", "bound", "binds", "dirty")

    def __init__(self, handle: Any, objects: list[Any], args: Sequence[int], varying: Sequence[int],
                 stores: list[tuple[int, Store]]) -> None:
        """varying: the arguments whose objects may change at run time; stores: (output k, its value's store)."""
        self.handle, self.objects, self.args, self.stores = handle, objects, list(args), stores
        self.key = key_of(objects, sorted(set(varying)), [])
        self.seen: Any = None
        self.held: list[Any] = []  # the arrays of the last full call: alive, so no new array takes an id in `seen`
        self.bound: Step | None = None
        self.binds = 0
        self.dirty = True

    def __call__(self) -> None:
        bound = self.bound
        if bound is not None and (not self.dirty or self.key() == self.seen):
            self.dirty = False
            bound()
            return
        self.bound = None
        objects = self.objects
        frozen = tuple(objects[i] for i in self.args)
        results = self.handle.execute(frozen)
        for k, store in self.stores:
            store(results[k])
        self.binds += 1
        self.held = [objects[i] for i in self.args]
        self.seen, self.dirty = self.key(), False
        steady = getattr(self.handle, "steady", None)
        if steady is not None and all(map(operator.is_, self.held, frozen)):
            self.bound = steady(frozen)
