"""Turns a plan's instruction list into a flat list of pre-bound callables.

Each step is a zero-argument callable; a jump step returns the index of the next
instruction, every other step's result is ignored. Arguments whose objects never change are captured at load time, so a
static program's call is `for step in steps: step()` with no lookups. Values that do change
identity at run time ("rebound": results of prim ops, dynamically shaped tensors, MoveCall
targets, caller-supplied inputs) are read from the live value list, and every list value
that holds them is updated in place when they change.

A call whose arguments are all fixed gets its kernel's fast path when it has one (the numpy
calls the kernel would make, decided once; see etbuild.runtime.kernel_registry), and a layout copy
becomes a view of its input where the plan allows, or else one bound copy (see aliasing).
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from etbuild.errors import InvalidProgram, KernelError
from etbuild.runtime import aliasing, checks, control_flow, features, steady
from etbuild.runtime.format import program as fb
from etbuild.runtime.kernel_registry import KernelInfo, canonical_name
from etbuild.runtime.steps import Step
from etbuild.runtime.values import Values, holds_data, list_items

KernelLookup = Callable[[str], "KernelInfo | None"]


def rebound_values(plan: fb.ExecutionPlan, instructions: list[fb.Instruction]) -> set[int]:
    """Indices of values whose object can change between or during calls."""
    values = plan.values
    rebound = {i for i in plan.inputs if not _fixed_tensor(values[i].val)}
    for ins in instructions:
        a = ins.instr_args
        if features.CONTROL_FLOW and isinstance(a, fb.MoveCall):
            rebound.add(a.move_to)
        elif features.DELEGATES and isinstance(a, fb.DelegateCall):
            rebound.update(i for i in a.args if not _fixed_tensor(values[i].val))  # dynamic outputs get resized
        elif isinstance(a, fb.KernelCall) and a.args:
            for r in _result_indices(plan, a.args[-1]):
                if not _fixed_tensor(values[r].val):
                    rebound.add(r)
            first = values[a.args[0]].val
            if isinstance(first, fb.Tensor) and not _fixed_tensor(first):
                rebound.add(a.args[0])  # a call without a result slot may grow its first argument
    return rebound


def check_instruction_indices(plan: fb.ExecutionPlan, instructions: list[fb.Instruction]) -> None:
    """Every value index an instruction names exists; raises InvalidProgram otherwise."""
    n = len(plan.values)
    for pc, ins in enumerate(instructions):
        for i in _value_indices(ins.instr_args, f"instruction {pc}"):
            if not 0 <= i < n:
                raise InvalidProgram(f"instruction {pc}: value index {i} is out of range (0..{n - 1})")


def _value_indices(a: Any, where: str) -> list[int]:
    """The value indices an instruction names; InvalidProgram for one this runtime cannot run."""
    if a is None:
        raise InvalidProgram(f"{where}: no instruction arguments")
    if isinstance(a, fb.KernelCall):
        return list(a.args)
    if isinstance(a, fb.FreeCall):
        return [a.value_index]
    if features.DELEGATES and isinstance(a, fb.DelegateCall):
        return list(a.args)
    if features.CONTROL_FLOW and isinstance(a, fb.MoveCall):
        return [a.move_from, a.move_to]
    if features.CONTROL_FLOW and isinstance(a, fb.JumpFalseCall):
        return [a.cond_value_index]
    raise InvalidProgram(f"{where}: {type(a).__name__} instructions are not supported by this trimmed runtime")


def _fixed_tensor(v: Any) -> bool:
    """A constant or planned static tensor: the same array object for the method's lifetime."""
    return (
        isinstance(v, fb.Tensor) and (v.allocation_info is not None or holds_data(v))
        and v.shape_dynamism == fb.TensorShapeDynamism.STATIC
    )


def _result_indices(plan: fb.ExecutionPlan, ret: int) -> list[int]:
    v = plan.values[ret].val
    if features.VALUE_LISTS and isinstance(v, fb.TensorList):
        return list_items(plan, ret)  # the list object itself is updated in place
    return [ret]


class Binder:
    """Builds the steps of one chain."""

    def __init__(self, values: Values, kernels: KernelLookup, delegates: Mapping[int, Any]) -> None:
        self.values = values
        self.plan = values.plan
        self.kernels = kernels
        self.delegates = delegates
        self.rebound: set[int] = set()
        self.unknown: set[int] = set()  # values not known at load (see checks.varying)
        self.aliaser: aliasing.Aliaser | None = None
        self.quiet = False  # a fast step bypasses a kernel's floating-point-warning guard (see Method)

    def check(self, instructions: list[fb.Instruction]) -> None:
        """What must hold before any instruction is bound or run (at load, preloading included):
        indices in range, instruction kinds known, storage the plan can hold."""
        check_instruction_indices(self.plan, instructions)
        checks.storage(self.plan, instructions, self.values.objects)

    def bind(self, instructions: list[fb.Instruction]) -> list[Step]:
        """The steps of a chain, checked by `check` (a jump step returns the next pc; see control_flow)."""
        if features.LIVE_VALUES:
            self.rebound = rebound_values(self.plan, instructions)
            self.unknown = checks.varying(self.plan, self.rebound)
        if not features.CONTROL_FLOW or not any(isinstance(i.instr_args, _JUMPS) for i in instructions):
            writes = functools.partial(_delegate_writes, self.delegates) if features.DELEGATES else None
            self.aliaser = aliasing.Aliaser(self.plan, instructions, self.values.objects, self._info, self.rebound,
                                            writes)
        steps = []
        called = _delegate_calls(instructions) if features.DELEGATES else Counter()
        for pc, ins in enumerate(instructions):
            a = ins.instr_args
            where = f"instruction {pc}"
            if isinstance(a, fb.KernelCall):
                steps.append(self.kernel_step(a, where, pc))
            elif features.DELEGATES and isinstance(a, fb.DelegateCall):
                steps.append(_delegate_step(self, a, where, called[a.delegate_index] > 1))
            elif features.CONTROL_FLOW and isinstance(a, (fb.MoveCall, fb.JumpFalseCall)):
                steps.append(control_flow.step(self.values, a, pc, instructions, where))
            else:  # FreeCall (check_instruction_indices rejected the rest): planned memory needs no freeing
                steps.append(_noop)
        return steps

    def operator_name(self, op_index: int, where: str) -> str:
        ops = self.plan.operators
        if not 0 <= op_index < len(ops):
            raise InvalidProgram(f"{where}: operator index {op_index} is out of range ({len(ops)} operators)")
        return canonical_name(ops[op_index].name or "", ops[op_index].overload or "")

    def _info(self, call: fb.KernelCall) -> KernelInfo | None:
        """The kernel of a call, None when it names no operator this runtime has (bind says so)."""
        if not 0 <= call.op_index < len(self.plan.operators):
            return None
        return self.kernels(self.operator_name(call.op_index, ""))

    def kernel_step(self, call: fb.KernelCall, where: str, pc: int = -1) -> Step:
        name = self.operator_name(call.op_index, where)
        info = self.kernels(name)
        if info is None:
            raise InvalidProgram(f"{where}: operator {name} has no kernel in this runtime")
        nparams = len(info.params)
        args = list(call.args)
        if len(args) not in (nparams, nparams + 1):
            raise InvalidProgram(
                f"{where}: {name} takes {nparams} arguments and a result, the program gives {len(args)} values"
            )
        checks.kernel_call(self.plan, info, args, self.values.objects, self.unknown, where)
        # Without a result slot (et_copy_index), the returned tensor replaces the first argument.
        ret = args[nparams] if len(args) > nparams else None
        if ret is None and info.kinds.startswith("T") and info.kinds.endswith(">T"):
            ret = args[0]
        store = self._storer(ret, where) if ret is not None else None
        if store is None and self._fixed(call):
            fast = self._fast_step(info, call, pc)
            if fast is not None:
                return fast
        rebinding = self._steady_step(info, args, ret, store, call, pc)
        if rebinding is not None:
            return rebinding
        call_fn = self._caller(info.fn, args[:nparams])
        if store is None:
            return call_fn
        if features.LIVE_VALUES and info.kinds.endswith(">f"):  # a number: of the kind its value holds
            store = _number_store(store, checks.type_name(self.plan, ret), f"{where}: {name}")
        return lambda: store(call_fn())

    def _fixed(self, call: fb.KernelCall) -> bool:
        """Every value the call touches keeps its object for the method's life: tensors static and
        planned (or constant), nothing else rebound at run time."""
        values = self.plan.values
        for i in checks.touched(self.plan, call):
            v = values[i].val
            if i in self.rebound or (isinstance(v, fb.Tensor) and not _fixed_tensor(v)):
                return False
        return True

    def _steady_step(self, info: KernelInfo, args: list[int], ret: int | None, store: Any, call: fb.KernelCall,
                     pc: int) -> Step | None:
        """A step bound again when the call's arguments change (etbuild.runtime.steady), for a call some of whose
        arguments change at run time and whose result is its out argument itself or a pure view; else None. A
        layout copy whose out may hold a view of its input (aliasing.Aliaser.may_view) stores that view."""
        if not features.LIVE_VALUES or not steady.applies(info):
            return None
        nparams = len(info.params)
        varying = self._varying(args[:nparams])
        if not varying or not (info.pure or ret is None or (nparams > 0 and ret == args[nparams - 1])):
            return None
        if info.fast is not None and hasattr(info.fn, "__wrapped__"):  # its fast path skips common.quiet
            self.quiet = True
        may_view = info.view is not None and self.aliaser is not None and pc >= 0 \
            and self.aliaser.may_view(pc, call, info)
        step = steady.Rebinding(info, self.values.objects, args[:nparams], info.params, varying, ret, store, may_view)
        self.values.watch(self._watched(varying | ({ret} if info.pure and ret is not None else set())), step)
        return step

    def _watched(self, varying: set[int]) -> list[int]:
        """The values whose stores may change what these varying arguments hold: each, and an int list's items."""
        watched = list(varying)
        for i in varying:
            if features.VALUE_LISTS and isinstance(self.plan.values[i].val, fb.IntList):
                watched.extend(list_items(self.plan, i))
        return watched

    def _varying(self, arg_idx: list[int]) -> set[int]:
        """The arguments whose object, or (int lists) whose items, may change at run time."""
        varying = set()
        for i in arg_idx:
            v = self.plan.values[i].val
            if i in self.rebound or (features.VALUE_LISTS and isinstance(v, fb.IntList)
                                     and not self.rebound.isdisjoint(list_items(self.plan, i))):
                varying.add(i)
        return varying

    def _fast_step(self, info: KernelInfo, call: fb.KernelCall, pc: int) -> Step | None:
        """A call of fixed arguments as a view (no step), a bound copy, or its kernel's fast path."""
        objs = [self.values.objects[i] for i in call.args[: len(info.params)]]
        views = aliasing.views_of(info, objs)
        if views is not None:
            if self.aliaser is not None and pc >= 0 and self.aliaser.try_alias(pc, call, info, views):
                return _noop
            outs = objs[-1] if isinstance(objs[-1], list) else [objs[-1]]
            return aliasing.copy_step(views, outs)
        try:
            step = info.fast(*objs) if info.fast is not None else None
        except aliasing.BAD_ARGS:  # arguments its fast path cannot take: the kernel's checks will say why
            return None
        if step is not None and hasattr(info.fn, "__wrapped__"):  # decorated with common.quiet
            self.quiet = True
        return step

    def _caller(self, fn: Callable[..., Any], arg_idx: list[int]) -> Callable[[], Any]:
        objs = self.values.objects
        if not features.LIVE_VALUES or self.rebound.isdisjoint(arg_idx):
            return functools.partial(fn, *[objs[i] for i in arg_idx])
        return lambda: fn(*[objs[i] for i in arg_idx])

    def _storer(self, ret: int, where: str) -> Callable[[Any], None] | None:
        """What stores a call's result when its value changes identity (None: the kernel wrote in place)."""
        if not features.LIVE_VALUES:
            for r in _result_indices(self.plan, ret):
                if not _fixed_tensor(self.plan.values[r].val):
                    raise features.missing("LIVE_VALUES", f"{where}: its result, value {r},")
            return None
        targets = [i for i in _result_indices(self.plan, ret) if i in self.rebound]
        if not targets:
            return None
        if features.VALUE_LISTS and isinstance(self.plan.values[ret].val, fb.TensorList):
            items = list_items(self.plan, ret)
            setters = [(k, self.values.setter(i)) for k, i in enumerate(items) if i in self.rebound]

            def store_all(result: Any) -> None:
                for k, set_item in setters:
                    set_item(result[k])

            return store_all
        return self.values.setter(ret)


_NUMBER_TYPES = {"Int": int, "Double": (int, float), "Bool": (bool, np.bool_)}


def _number_store(store: Callable[[Any], None], slot: str, where: str) -> Callable[[Any], None]:
    """A store that refuses a result of another kind than its value (a float for an Int value)."""
    accepted = _NUMBER_TYPES[slot]

    def store_number(result: Any) -> None:
        if not isinstance(result, accepted):
            raise KernelError(f"{where} returned a {type(result).__name__} for a value of type {slot}")
        store(result)

    return store_number


def _delegate_calls(instructions: list[fb.Instruction]) -> Counter[int]:
    """How many instructions call each delegate."""
    return Counter(i.instr_args.delegate_index for i in instructions if isinstance(i.instr_args, fb.DelegateCall))


def _delegate_writes(delegates: Mapping[int, Any], call: fb.DelegateCall) -> set[int] | None:
    """The values a delegate call writes: the arguments at its handle's output positions (None: unknown). Module
    functions, not methods, so that a runtime without delegates ships neither (nor reads DelegateCall)."""
    handle = delegates.get(call.delegate_index)
    if handle is None or len(call.args) != handle.arg_count:
        return None
    return {call.args[p] for p in handle.output_positions}


def _delegate_step(binder: Binder, call: fb.DelegateCall, where: str, shared: bool = False) -> Step:
    """Call the delegate's handle; outputs whose arrays change (dynamic shapes) are stored back. A delegate that no
    other instruction calls runs its handle's steady step while its arrays stay the same (steady.DelegateCall)."""
    handle = binder.delegates.get(call.delegate_index)
    if handle is None:
        raise InvalidProgram(f"{where}: delegate index {call.delegate_index} is out of range")
    args = list(call.args)
    if len(args) != handle.arg_count:
        raise InvalidProgram(f"{where}: the delegate takes {handle.arg_count} values, the call passes {len(args)}")
    stores = [(k, binder.values.setter(args[p])) for k, p in enumerate(handle.output_positions)
              if args[p] in binder.rebound]
    objs = binder.values.objects
    if not shared and hasattr(handle, "steady"):
        binder.quiet = binder.quiet or bool(getattr(handle, "quiet", True))  # its steady step runs unguarded
        varying = [i for i in args if i in binder.rebound]
        step = steady.DelegateCall(handle, objs, args, varying, stores)
        binder.values.watch(varying, step)
        return step
    if not features.LIVE_VALUES or binder.rebound.isdisjoint(args):
        fixed = tuple(objs[i] for i in args)  # a tuple: the handle may skip re-checking the same arrays
        return functools.partial(handle.execute, fixed)

    last: list[tuple[Any, ...]] = [()]

    def execute() -> None:
        # The same tuple while the arrays stay the same objects: the handle may skip re-checking them.
        current = [objs[i] for i in args]
        frozen = last[0]
        if len(frozen) != len(current) or not all(map(operator.is_, current, frozen)):
            frozen = last[0] = tuple(current)
        results = handle.execute(frozen)
        for k, store in stores:
            store(results[k])

    return execute


_JUMPS = (fb.MoveCall, fb.JumpFalseCall)


def _noop() -> None:
    return None
