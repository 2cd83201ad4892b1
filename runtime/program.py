"""Program and Method: load a `.pte`, plan its memory, bind its kernels, run it.

    program = Program.load("mlp.pte")          # mmap; header, identifier, offsets checked
    program = Program.load("mlp.pte", data=["mlp.ptd"])  # weights apart: etbuild.runtime.data_files
    program = Program.load("mlp.pte", threads=1)  # numerics options: etbuild.runtime.threads.NumericOptions
    forward = program.load_method("forward")   # arenas, zero-copy constants, bound steps
    outputs = forward(x)                       # copies inputs in, runs, copies outputs out
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Container, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.errors import InvalidProgram, KernelError, MethodInputError
from etbuild.runtime import control_flow, features, hugepages, threads
from etbuild.runtime.binding import Binder
from etbuild.runtime.data_files import DataFile, NamedData, load_data_file
from etbuild.runtime.delegates import init_delegates, named_data, processed_blob
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import ExtendedHeader, read_program, segment_bytes
from etbuild.runtime.inputs import input_setters
from etbuild.runtime.kernel_registry import KernelInfo, load_all
from etbuild.runtime.preload import preload as preload_constants
from etbuild.runtime.state import with_state
from etbuild.runtime.values import ConstantData, Values, materialize, unplanned_outputs

DEFAULT_BUDGET_FACTOR = 1000  # a call may run this many times its chain's instructions (loops)
MEMORY_FRACTION = 4  # by default, planned memory may take a quarter of the machine's memory


class Program:
    """A loaded `.pte`: its decoded flatbuffer and zero-copy access to its segments."""

    def __init__(self, data: Any, source: str = "<bytes>", level_names: Mapping[str, list[str]] | None = None,
                 data_files: Sequence[DataFile] = ()) -> None:
        self.data = data
        self.source = source
        self.program, self.header = _read(data, source)
        self.level_names = dict(level_names or {})  # method -> memory level names, by memory id
        self.data_files = tuple(data_files)  # `.ptd` files the program's EXTERNAL keys are looked up in
        self._named: Mapping[str, memoryview] | None = None  # the key lookup, made when something needs it
        self._state: dict[int, np.ndarray] | None = None  # memory id -> the arena every method shares
        self.options = threads.DEFAULTS  # how its methods' kernels compute (threads, BLAS, compiled loops)

    @classmethod
    def load(cls, path: str | Path, data: Sequence[str | Path] = (), **options: Any) -> Program:
        """Memory-map and check a `.pte` file, and the `.ptd` data files its keys are looked up in. options:
        `threads`, `blas`, `native` (etbuild.runtime.threads.NumericOptions), for every method it loads."""
        program = cls._load(path, data)
        program.options = threads.NumericOptions(**options)
        return program

    @classmethod
    def _load(cls, path: str | Path, data: Sequence[str | Path]) -> Program:
        path = Path(path)
        if data and not features.EXTERNAL_DATA:
            raise features.missing("EXTERNAL_DATA", f"{path}: loading it with .ptd data files")
        files = [load_data_file(p) for p in data] if features.EXTERNAL_DATA else []
        with open(path, "rb") as f:
            if path.stat().st_size == 0:
                raise InvalidProgram(f"{path}: file is empty")
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if features.MEMORY_LEVELS:
            return cls(data, str(path), _level_names(path.parent / "memory.json"), files)
        return cls(data, str(path), data_files=files)

    @classmethod
    def from_bytes(cls, data: bytes, data_files: Sequence[DataFile] = ()) -> Program:
        return cls(data, data_files=data_files)

    def named_data(self) -> Mapping[str, memoryview]:
        """The one key lookup: the program's named data, then its data files (made once). Without
        `features.EXTERNAL_DATA`, the program's named data alone (what its delegates read)."""
        if not (features.DELEGATES or features.EXTERNAL_DATA):
            raise features.missing("DELEGATES", f"{self.source}: named data")
        if self._named is None:
            try:
                own = named_data(self.data, self.program, self.header)
                self._named = NamedData(own, self.data_files) if features.EXTERNAL_DATA else own
            except InvalidProgram as exc:
                raise type(exc)(f"{self.source}: {exc}") from None
        return self._named

    def _by_level(self, method: str, plan: fb.ExecutionPlan, buffers: Mapping[str, np.ndarray]) -> list[Any]:
        """Caller buffers keyed by level name → a list by memory id (None: allocate)."""
        if not features.MEMORY_LEVELS:
            raise features.missing("MEMORY_LEVELS", "buffers given by memory level name")
        names = self.level_names.get(method)
        count = len(plan.non_const_buffer_sizes) - 1
        if not names or len(names) != count:
            raise MethodInputError(
                f"{self.source}: buffers are given by level name but the level names of method {method!r} "
                "are unknown: keep memory.json beside the .pte, or pass the buffers as a list by memory id"
            )
        unknown = sorted(set(buffers) - set(names))
        if unknown:
            raise MethodInputError(f"no memory level {', '.join(map(repr, unknown))}; levels: {', '.join(names)}")
        return [buffers.get(n) for n in names]

    @property
    def method_names(self) -> list[str]:
        return [plan.name or "" for plan in self.program.execution_plan]

    def plan(self, name: str) -> fb.ExecutionPlan:
        """The execution plan called `name`."""
        for plan in self.program.execution_plan:
            if plan.name == name:
                return plan
        raise MethodInputError(f"{self.source}: no method {name!r}; methods: {', '.join(self.method_names)}")

    def constant_data(self) -> ConstantData:
        """Views of the constant and mutable-initial-state buffers, by data_buffer_idx."""
        p = self.program
        if p.constant_buffer:
            constants = [memoryview(b.storage) for b in p.constant_buffer]
        else:
            constants = self._subsegments(p.constant_segment)
        mutable = []
        if features.MUTABLE_STATE and p.mutable_data_segments:
            mutable = self._subsegments(p.mutable_data_segments[0])
        if not features.EXTERNAL_DATA:
            return ConstantData(constants, mutable)  # tensor locations are not read: see values.make_tensor
        return ConstantData(constants, mutable, self.named_data().constant)

    def _subsegments(self, sub: fb.SubsegmentOffsets | None) -> list[memoryview]:
        if sub is None or not sub.offsets:
            return []
        seg = segment_bytes(self.data, self.program, self.header, sub.segment_index)
        views = []
        for off in sub.offsets:
            if off > len(seg):
                raise InvalidProgram(f"{self.source}: sub-segment offset {off} is beyond its {len(seg)}-byte segment")
            views.append(seg[off:])
        return views

    def load_method(
        self,
        name: str = "forward",
        *,
        buffers: Sequence[np.ndarray] | Mapping[str, np.ndarray] | None = None,
        kernels: Mapping[str, KernelInfo] | None = None,
        budget_factor: int = DEFAULT_BUDGET_FACTOR,
        time_limit: float | None = None,
        max_planned_bytes: int | None = None,
        preload: bool = True,
    ) -> Method:
        """Prepare a method for calls: arenas, tensor views, bound kernels.

        buffers: caller-provided planned memory: a list in memory-id order, or a mapping from
            level name (as in the recipe's `memory.levels`) to buffer; levels not given are
            allocated (default: all allocated).
        kernels: the kernel registry to bind against (default: every shipped kernel).
        budget_factor: a call whose chain jumps stops (InvalidProgram) after executing this many
            times the chain's instruction count: a loop that never ends fails in milliseconds.
        time_limit: seconds a call of a chain with jumps may run (default: no limit).
        max_planned_bytes: the most memory the method's plan may ask for (default: a quarter of
            the machine's memory, see `default_max_planned_bytes`).
        preload: run constant instructions (dequantizing int8 weights) once here, keeping their
            results outside the planned memory (`etbuild.runtime.preload`); False keeps every
            allocation within the plan and dequantizes on every call.
        """
        plan = self.plan(name)
        if isinstance(buffers, Mapping):
            buffers = self._by_level(name, plan, buffers)
        limit = default_max_planned_bytes() if max_planned_bytes is None else max_planned_bytes
        try:
            if features.MUTABLE_STATE:
                buffers = with_state(self, plan, buffers, limit)
            owned = unplanned_outputs(plan) if features.LIVE_VALUES else {}
            arenas = _arenas(plan, buffers, limit, sum(owned.values()), self.level_names.get(name))
            registry = kernels if kernels is not None else load_all()
            left = limit - sum(plan.non_const_buffer_sizes[1:]) - sum(owned.values())
            with threads.use(self.options) as binding:
                delegates = _delegates(self, plan, left) if features.DELEGATES and plan.delegates else {}
                method = Method(
                    plan, arenas, self.constant_data(), registry, budget_factor=budget_factor,
                    time_limit=time_limit, owned=owned, delegates=delegates, preload=preload,
                )
            _hold_numpy_blas(method, binding.numpy_blas, delegates)
            return method
        except InvalidProgram as exc:
            raise type(exc)(f"{self.source}: method {name!r}: {exc}") from None
        except MemoryError:
            raise InvalidProgram(f"{self.source}: method {name!r}: its planned memory could not be allocated") from None


def default_max_planned_bytes() -> int:
    """A quarter of the machine's physical memory (4 GiB where the platform does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // MEMORY_FRACTION
    except (AttributeError, ValueError, OSError):
        return 4 << 30


def _hold_numpy_blas(method: Method, bound: bool, delegates: dict[int, Any]) -> None:
    """numpy's BLAS held at one thread while the method runs (the pool threads products): when its kernels bound
    a product on it, or once a delegate asks for it, one block around the whole call."""
    if bound:
        method._run = threads.held(method._run)  # type: ignore[method-assign]
    elif delegates:
        method._run = threads.held_for(method._run, list(delegates.values()))  # type: ignore[method-assign]


def _delegates(program: Program, plan: fb.ExecutionPlan, left: int) -> dict[int, Any]:
    """Each delegate of the plan initialised by its backend (see etbuild.runtime.delegates);
    their working memory must fit in the `left` bytes of the memory limit.

    A function of its own, called only under `features.DELEGATES`, so that a trimmed runtime
    without delegates ships neither it nor the backend registry.
    """
    def blob(ref: fb.BackendDelegateDataReference, where: str) -> memoryview:
        return processed_blob(program.data, program.program, program.header, ref, where)

    with hugepages.arena():  # the delegates' packed constants side by side, in huge pages where the OS gives them
        handles = init_delegates(plan, blob, program.named_data())
    held = sum(h.planned_bytes for h in handles.values())
    if held > left:
        raise InvalidProgram(f"its delegates hold {held} bytes of working memory, more than the {left} bytes"
                             " that max_planned_bytes leaves beside the planned memory")
    return handles


def _level_list(names: list[str] | None, count: int) -> list[str]:
    """How errors name the planned buffers: by memory level when known, else by memory id."""
    if features.MEMORY_LEVELS and names and len(names) == count:
        return names
    return [f"memory id {i + 1}" for i in range(count)]


def _level_names(report: Path) -> dict[str, list[str]]:
    """Memory level names per method from the `memory.json` etbuild writes beside a `.pte`."""
    try:
        methods = json.loads(report.read_text())["methods"]
        return {name: [lv["name"] for lv in m["levels"]] for name, m in methods.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _read(data: Any, source: str) -> tuple[fb.Program, ExtendedHeader | None]:
    try:
        return read_program(data)
    except InvalidProgram as exc:
        raise InvalidProgram(f"{source}: {exc}") from None


def _arenas(
    plan: fb.ExecutionPlan, buffers: Sequence[Any] | None, limit: int, owned: int, names: list[str] | None
) -> list[np.ndarray]:
    """One uint8 arena per memory id: the caller's buffer where given, else a new zeroed one.

    The planned sizes and the `owned` bytes of unplanned outputs must fit within `limit`.
    """
    sizes = list(plan.non_const_buffer_sizes[1:])
    if any(s < 0 for s in sizes):
        raise InvalidProgram(f"planned buffer sizes {sizes} include a negative size")
    if sum(sizes) + owned > limit:
        raise InvalidProgram(f"its planned memory, {sum(sizes) + owned} bytes, exceeds max_planned_bytes ({limit})")
    if buffers is None:
        buffers = [None] * len(sizes)
    if len(buffers) != len(sizes):
        raise MethodInputError(f"the plan has {len(sizes)} memory buffers, {len(buffers)} were given")
    labels = _level_list(names, len(sizes))
    return [_arena(buf, size, label) for buf, size, label in zip(buffers, sizes, labels)]


def _arena(buf: Any, size: int, label: str) -> np.ndarray:
    if buf is None:
        return np.zeros(size, dtype=np.uint8)
    arr = buf.view(np.uint8).reshape(-1) if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if arr.nbytes < size:
        raise MethodInputError(f"buffer for {label} holds {arr.nbytes} bytes; the plan needs {size}")
    return arr


class Method:
    """One loaded method: call it with its inputs, get its flattened outputs."""

    def __init__(
        self,
        plan: fb.ExecutionPlan,
        arenas: list[np.ndarray],
        consts: ConstantData,
        kernels: Mapping[str, KernelInfo],
        *,
        budget_factor: int = DEFAULT_BUDGET_FACTOR,
        time_limit: float | None = None,
        owned: Container[int] = (),
        delegates: Mapping[int, Any] | None = None,
        preload: bool = True,
    ) -> None:
        """budget_factor, time_limit: see Program.load_method; owned: tensor values without memory
        in the plan that get memory of their own (unplanned outputs); delegates: delegate index →
        its backend's handle."""
        self.name = plan.name or ""
        self.plan = plan
        self.arenas = arenas
        self.input_indices = _checked(plan.inputs, len(plan.values), "input")
        self.output_indices = _checked(plan.outputs, len(plan.values), "output")
        self.values = Values(plan, materialize(plan, arenas, consts, owned))
        if len(plan.chains) != 1:
            raise InvalidProgram(f"expected one chain, found {len(plan.chains)}")
        instructions = plan.chains[0].instructions
        self.delegates = dict(delegates or {})  # delegate index -> its backend's handle
        binder = Binder(self.values, kernels.get, self.delegates)
        binder.check(instructions)
        preloaded = []
        if features.PRELOAD and preload:
            preloaded = preload_constants(plan, instructions, self.values.objects, binder.kernel_step)
        self.steps = binder.bind(instructions)
        for pc in preloaded:
            self.steps[pc] = _skip
        # Kernels that compute with floating-point warnings off (common.quiet) have fast paths that
        # skip that guard: the whole call runs under it instead, set once.
        self.quiet = binder.quiet
        if features.CONTROL_FLOW:
            self.budget, self.time_limit = max(budget_factor, 1) * len(instructions), time_limit
            self.is_jump = [isinstance(ins.instr_args, fb.JumpFalseCall) for ins in instructions]
            self.straight = not any(self.is_jump)
        self._set_inputs = input_setters(plan, self.values)

    def __call__(self, *inputs: Any) -> list[Any]:
        if len(inputs) != len(self._set_inputs):
            raise MethodInputError(
                f"method {self.name!r} takes {len(self._set_inputs)} inputs, got {len(inputs)}"
            )
        for set_input, value in zip(self._set_inputs, inputs):
            set_input(value)
        if self.quiet:
            with np.errstate(all="ignore"):
                self._run()
        else:
            self._run()
        objs = self.values.objects
        return [_output(objs[i]) for i in self.output_indices]

    def _run(self) -> None:
        if features.CONTROL_FLOW and not self.straight:
            control_flow.run(self)
            return
        pc = 0
        try:
            for pc, step in enumerate(self.steps):  # noqa: B007  (pc names the failing step)
                step()
        except (KernelError, InvalidProgram, MethodInputError):  # MethodInputError: a position past a cache
            raise
        except Exception as exc:  # a kernel rejected its arguments: say which instruction
            raise self.failure(pc, exc) from exc

    def failure(self, pc: int, exc: Exception) -> KernelError:
        """The error for instruction pc raising exc."""
        return KernelError(f"method {self.name!r} instruction {pc}: {type(exc).__name__}: {exc}")


def _skip() -> None:
    """The step of an instruction run once at load."""


def _checked(indices: list[int], n: int, what: str) -> list[int]:
    for i in indices:
        if not 0 <= i < n:
            raise InvalidProgram(f"{what} value index {i} is out of range (0..{n - 1})")
    return list(indices)


def _output(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True, subok=False)
    return value
