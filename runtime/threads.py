"""The runtime's one pool of threads, and the numeric options a program is bound with.

A step that splits its work runs `Pool.run(block, count)`: the blocks are claimed one at a time from a shared
counter by the calling thread and by the pool's workers alike, so the caller can take every block itself (as
pthreadpool's caller does). A worker whose core is busy, or that wakes late, claims fewer blocks or none, and the
step waits only for blocks already claimed: a busy or missing core costs at most its share, never a time slice of
the scheduler (a static split, OpenBLAS's or OpenMP's, waits for its slowest thread). The blocks are compiled loops
that release the GIL (numba's `nogil`) or BLAS calls (numpy and ctypes release it), so they run in parallel.

A split product runs `Pool.run_table(table)`: a table of BLAS calls that caller and workers claim and run in a
compiled loop without the GIL (etbuild.kernels.pool_loops, where numba is importable), a few µs a step where a
Python step costs two GIL hand-overs. There a worker spins a bounded time between steps (briefly once it finds
itself preempted: the cores are busy), then sleeps on a futex; elsewhere workers sleep on a condition. An idle
pool takes no CPU. A process forked after a pool started has none of its workers: the first step in the child
starts new ones.

A worker that claimed a block and then lost its core (another process took it) holds the step up until the
scheduler gives it one again, a time slice or more. The caller sees it: its own blocks done, it waited longer than
STALL_BLOCKS of them for a worker's. The pool then runs its next steps on the calling thread alone (`Backoff`):
ALONE_MIN steps, twice as many after each split that stalls again (at most ALONE_MAX), back to ALONE_MIN after one
that does not; so beside a busy process a call costs about its one-thread time, not a stall a step.

A worker that shares a core with another process slows a split without stalling it: the worker runs its blocks at
a fraction of a core, and spinning between steps it takes the caller's time on the steps that do not split. Where
Linux reports how long each thread waited for a core (the run delay in /proc/thread-self/schedstat), the pool
reads its workers' every CHECK_SPLITS split steps (`Crowding`); when they waited more than CROWDED of that time
and those steps were long (a mean of LONG_STEP_US µs or more, the caller's blocks and wait: a transformer's
128-row products; a vision transformer's 17-row ones, 110-190 µs a step, still gain beside a busy process), the
next CHECK_SPLITS steps run on the caller alone, twice as many after each check that finds the same again (at most
ALONE_MAX), the workers asleep. The last step alone wakes them, so the split that follows does not wait for a
wake-up.

Options are parameters, never the process's environment: `Program.load(..., threads=, blas=, native=)` binds its
kernels inside `use(NumericOptions(...))`, and a kernel reads `current()` while it binds (never while it runs).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import dataclasses
import functools
import glob
import importlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

Block = Callable[[int], object]
# Pauses (about 30-140 cycles each) a worker spins waiting for the next table step before it sleeps, and the caller
# spins waiting for blocks a worker claimed before it yields its core to that worker.
SERVE_SPINS, JOIN_SPINS = 20_000, 2_000
# A stall: the caller waited for a worker's blocks longer than STALL_BLOCKS of its own blocks and STALL_US µs.
STALL_BLOCKS, STALL_US = 2, 50
ALONE_MIN, ALONE_MAX = 4, 1024  # steps the caller then runs alone: doubled after each split that stalls again
# Every CHECK_SPLITS split steps the workers' run delay is read: over CROWDED of the time, the cores are crowded,
# and split steps of LONG_STEP_US µs or more (a mean) then gain too little
CHECK_SPLITS, CROWDED, LONG_STEP_US = 32, 0.1, 250


def default_threads() -> int:
    """The processors this process may run on (its affinity mask)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class NumericOptions:
    """How a program's kernels compute. threads: the most threads a step may use (None: `default_threads()`);
    blas: "auto" (the OpenBLAS of the scipy-openblas32 package, or on an Intel processor MKL where the `mkl` extra
    is installed; numpy's BLAS when neither is: kernels/numerics/blas.py), "openblas" (the packaged OpenBLAS),
    "numpy", "mkl", or a path to a `libmkl_rt`; native: numba's compiled loops where they exist (False: every step
    on numpy)."""

    threads: int | None = None
    blas: str = "auto"
    native: bool = True

    def __post_init__(self) -> None:
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads: expected a whole number of at least 1 (or None), got {self.threads!r}")
        if not isinstance(self.blas, str) or not self.blas:
            raise ValueError(f"blas: expected 'auto', 'openblas', 'numpy', 'mkl' or a path to libmkl_rt, "
                             f"got {self.blas!r}")

    @property
    def thread_count(self) -> int:
        return self.threads if self.threads is not None else default_threads()


@dataclasses.dataclass
class Binding:
    """What one `use` block binds with, and what its kernels report back: numpy_blas is set when a product was
    bound to numpy's BLAS at a size it would run on threads of its own (the caller then holds it at one thread
    while it runs the bound steps: `single_threaded`)."""

    options: NumericOptions
    numpy_blas: bool = False


DEFAULTS = NumericOptions()
_current: contextvars.ContextVar[Binding | None] = contextvars.ContextVar("etbuild_numerics", default=None)
_lock = threading.Lock()


def current() -> NumericOptions:
    """The options kernels bind with now, in this thread: the innermost `use` block's, else the defaults."""
    binding = _current.get()
    return binding.options if binding is not None else DEFAULTS


def note_numpy_blas() -> None:
    """Tell the innermost `use` block that a product bound to numpy's BLAS may start its threads."""
    binding = _current.get()
    if binding is not None:
        binding.numpy_blas = True


@contextlib.contextmanager
def use(options: NumericOptions) -> Iterator[Binding]:
    """Kernels bound in this block (in this thread) take `options`; the Binding collects what they report."""
    binding = Binding(options)
    token = _current.set(binding)
    try:
        yield binding
    finally:
        _current.reset(token)


class _Job:
    """One step's blocks: a claim counter, a done counter, the first error, and an event for the last block."""

    __slots__ = ("block", "count", "claims", "finished", "done", "error")

    def __init__(self, block: Block, count: int) -> None:
        self.block, self.count = block, count
        self.claims, self.finished = itertools.count(), itertools.count(1)
        self.done = threading.Event()
        self.error: BaseException | None = None


class Backoff:
    """Whether the pool's next step runs on the calling thread alone, after splits that stalled or checks that
    found the cores crowded (see the module's docstring); advisory counts, shared by the pool's callers."""

    def __init__(self) -> None:
        self.left, self.span, self.crowded_span = 0, ALONE_MIN, CHECK_SPLITS

    def alone(self) -> bool:
        """Whether this step runs on the caller alone (counting it)."""
        if self.left > 0:
            self.left -= 1
            return True
        return False

    def settle(self, own_blocks: int, own_us: float, waited_us: float) -> bool:
        """Account a split step: the blocks the caller ran, the µs they took, the µs it then waited for blocks a
        worker claimed. Whether it stalled (a step the caller ran no block of tells nothing)."""
        if own_blocks <= 0:
            return False
        stalled = waited_us > max(STALL_US, STALL_BLOCKS * own_us / own_blocks)
        if stalled:
            self.left, self.span = self.span, min(2 * self.span, ALONE_MAX)
        else:
            self.span = ALONE_MIN
        return stalled

    def crowd(self, waited_share: float, step_us: float) -> bool:
        """Account a check of the workers' run delay: the share of the time they waited for a core, and the mean
        µs of the split steps since the last check. Whether the cores are crowded for steps that long (the next
        steps then run alone: CHECK_SPLITS, doubled after each such check)."""
        crowded = waited_share > CROWDED and step_us >= LONG_STEP_US
        if crowded:
            self.left = max(self.left, self.crowded_span)
            self.crowded_span = min(2 * self.crowded_span, ALONE_MAX)
        else:
            self.crowded_span = CHECK_SPLITS
        return crowded


class Crowding:
    """How long the pool's workers waited for a core (Linux's run delay of each worker thread, read from its
    /proc/thread-self/schedstat) over the last CHECK_SPLITS split steps; nothing where it cannot be read."""

    def __init__(self) -> None:
        self.files: list[int] = []
        self.splits, self.since_ns, self.since_delay, self.step_us = 0, 0, 0, 0.0

    def watch_this_thread(self) -> None:
        """Read the calling thread's run delay from now on (a worker calls it as it starts)."""
        with contextlib.suppress(OSError):
            self.files.append(os.open("/proc/thread-self/schedstat", os.O_RDONLY))

    def close(self) -> None:
        """Stop reading (a forked child's files are its parent's workers')."""
        for fd in self.files:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.files = []

    def step(self, step_us: float) -> tuple[float, float] | None:
        """Count a split step of step_us µs: every CHECK_SPLITS of them, the share of the time since that the
        workers waited for a core (a mean over the workers) and the steps' mean µs; else, or where the run delay
        cannot be read, None."""
        if not self.files:
            return None
        try:
            if self.splits == 0:
                self.since_ns, self.since_delay, self.step_us = time.perf_counter_ns(), self._delay(), 0.0
                self.splits = 1  # the window begins after this step
                return None
            self.splits, self.step_us = self.splits + 1, self.step_us + step_us
            if self.splits <= CHECK_SPLITS:
                return None
            waited = self._delay() - self.since_delay
        except (OSError, ValueError, IndexError):
            self.close()
            return None
        self.splits = 0
        share = waited / max(1, time.perf_counter_ns() - self.since_ns) / len(self.files)
        return share, self.step_us / CHECK_SPLITS

    def restart(self) -> None:
        """The next split step begins a new count (after steps run alone)."""
        self.splits = 0

    def _delay(self) -> int:
        return sum(int(os.pread(fd, 128, 0).split()[1]) for fd in self.files)


class Pool:
    """`threads` − 1 worker threads that run a step's blocks beside the calling thread: Python blocks (`run`) and,
    where numba's loops are importable, tables of BLAS calls claimed without the GIL (`run_table`)."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self._ready = threading.Condition()
        self._job: _Job | None = None
        self._generation = 0
        self._pid = -1
        self._ctrl: np.ndarray | None = None  # the compiled side's control words (kernels/pool_loops.py)
        self._step = threading.Lock()  # one table step at a time; another caller runs its table alone
        self.backoff = Backoff()
        self.crowding = Crowding()

    def run(self, block: Block, count: int) -> None:
        """block(0) … block(count − 1), each once, spread over the calling thread and the workers; returns when
        all have run. An exception in a block is raised here (after the claimed blocks finish)."""
        if count <= 1 or self.threads == 1 or self.backoff.alone():
            for i in range(count):
                block(i)
            return
        if self._pid != os.getpid():
            self._start()
        job = _Job(block, count)
        with self._ready:
            self._job, self._generation = job, self._generation + 1
            self._ready.notify(min(count, self.threads) - 1)
        if self._ctrl is not None:  # a worker in the compiled loop, spinning or asleep, comes back for it
            loops = compiled_loops()
            loops.post(self._ctrl, self._generation)
            loops.wake(self._ctrl, self.threads - 1)
        start = time.perf_counter()
        own = _work(job)
        mid = time.perf_counter()
        if not job.done.is_set():
            job.done.wait()
        self.backoff.settle(own, (mid - start) * 1e6, (time.perf_counter() - mid) * 1e6)
        if job.error is not None:
            raise job.error

    def run_table(self, table: np.ndarray) -> None:
        """Every block (row) of a table of BLAS calls (kernels/pool_loops.py), claimed by the calling thread and
        the workers without the GIL; returns when all have run. The caller runs them all where there are no
        workers, no compiled loops, or another step is running, and while the pool backs off after a stall."""
        loops = compiled_loops()
        if loops is None:
            raise RuntimeError("run_table needs numba's loops (etbuild.kernels.pool_loops)")
        if self.threads > 1 and self._pid != os.getpid():
            self._start()
        if self.threads == 1 or table.shape[0] < 2 or not self._step.acquire(blocking=False):
            loops.run_all(table)
        elif self.backoff.alone():
            try:
                loops.run_all(table)
                if self.backoff.left == 0:  # the next step splits: workers asleep since the back-off wake for it now
                    self.crowding.restart()
                    if loops.wake(self._ctrl, self.threads - 1):
                        with self._ready:
                            self._ready.notify_all()
            finally:
                self._step.release()
        else:
            self._split(loops, table)

    def _split(self, loops: Any, table: np.ndarray) -> None:
        """The table's blocks over the caller and the workers (the caller holds `_step`; released here)."""
        try:
            ctrl = self._ctrl
            gen = loops.publish(ctrl, table, self.threads - 1)
            if gen < 0:  # a worker sleeps: wake it (it joins once it has the GIL; the caller does not wait)
                gen = -gen
                with self._ready:
                    self._ready.notify_all()
            while not loops.join(ctrl, table, gen, JOIN_SPINS):
                os.sched_yield()  # a worker holds a block but not a core: let it have this one
            own, own_us, waited_us = loops.stats(ctrl)
            self.backoff.settle(own, own_us, waited_us)
            checked = self.crowding.step(own_us + waited_us)
            if checked is not None:
                self.backoff.crowd(*checked)
        finally:
            self._step.release()

    def _start(self) -> None:
        """Start the workers (again, in a forked child: threads do not survive a fork)."""
        self._ready = threading.Condition()  # a fresh lock: a forked child may hold a copy taken mid-wait
        self._step = threading.Lock()
        self._job, self._generation, self._pid = None, 0, os.getpid()
        self.crowding.close()
        loops = compiled_loops()
        self._ctrl = None if loops is None else loops.words(self.threads - 1)
        if self._ctrl is not None:  # compiled (or loaded from numba's cache) here, not by a worker holding the GIL
            loops.serve(self._ctrl, 0, 0, 0, -1)
        for w in range(self.threads - 1):
            threading.Thread(target=self._serve, args=(w,), name="etbuild-pool", daemon=True).start()

    def _serve(self, w: int) -> None:
        self.crowding.watch_this_thread()
        seen, pid, ctrl = 0, os.getpid(), self._ctrl
        loops, seen_table = (compiled_loops(), 0) if ctrl is not None else (None, 0)
        while True:
            if loops is not None:  # spin for tables without the GIL, back here when idle or for a Python job
                seen_table = loops.serve(ctrl, seen_table, w, SERVE_SPINS, seen)
            with self._ready:
                while self._generation == seen and (loops is None or loops.generation(ctrl) == seen_table):
                    self._ready.wait()
                if loops is not None:
                    loops.awake(ctrl, w)
                job = self._job if self._generation != seen else None
                seen = self._generation
            if os.getpid() != pid:  # pragma: no cover  (a thread does not survive a fork)
                return
            if job is not None:
                _work(job)


def _work(job: _Job) -> int:
    """Claim and run job's blocks until none is left (next() of an itertools.count is atomic under the GIL); the
    thread that finishes the last block sets job.done. How many blocks it ran."""
    count, claims, finished, block = job.count, job.claims, job.finished, job.block
    ran = 0
    while (i := next(claims)) < count:
        ran += 1
        try:
            block(i)
        except BaseException as exc:  # noqa: BLE001  (handed to the caller, which raises it)
            job.error = job.error or exc
        if next(finished) == count:
            job.done.set()
    return ran


_pools: dict[int, Pool] = {}


@functools.cache
def compiled_loops() -> Any:
    """kernels/pool_loops (claims without the GIL), or None without numba (a trimmed runtime has no such module)."""
    try:
        return importlib.import_module("etbuild.kernels.pool_loops")
    except ImportError:
        return None


def pool(threads: int) -> Pool:
    """The process's pool of `threads` threads (one per count, shared by every program bound with it)."""
    with _lock:
        found = _pools.get(threads)
        if found is None:
            found = _pools[threads] = Pool(threads)
        return found


class _SingleThreaded:
    """numpy's BLAS on one thread inside `with single_threaded:` blocks (the pool threads products itself); the
    count it had is restored when the last such block in the process ends (about 0.5 µs a block). A no-op where
    numpy's BLAS is not an OpenBLAS whose count can be read and set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = self._saved = 0

    def __enter__(self) -> None:
        counts = _openblas_counts()
        if counts is not None:
            with self._lock:
                if self._depth == 0:
                    self._saved = counts[0]()
                    if self._saved != 1:
                        counts[1](1)
                self._depth += 1

    def __exit__(self, *exc: object) -> None:
        counts = _openblas_counts()
        if counts is not None:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._saved != 1:
                    counts[1](self._saved)


single_threaded = _SingleThreaded()


def held(run: Callable[[], None]) -> Callable[[], None]:
    """run, inside `with single_threaded`."""
    def call() -> None:
        with single_threaded:
            run()
    return call


def held_for(run: Callable[[], None], handles: list[Any]) -> Callable[[], None]:
    """run, which calls these delegate handles: after each call, when a handle asked to hold numpy's BLAS
    (`hold_blas`, known once it has bound its steps at its first call), the whole of run is held instead and the
    handles' own holds are dropped, one `single_threaded` block a call instead of one a delegate call."""
    whole = held(run)

    def call() -> None:
        nonlocal run, handles
        run()
        if any(getattr(h, "hold_blas", False) for h in handles):
            for h in handles:
                h.hold_blas = False
            run, handles = whole, []  # a handle that binds again later holds inside this block (nested: cheap)
    return call


@functools.cache
def numpy_openblas() -> ctypes.CDLL | None:
    """The OpenBLAS bundled with numpy (numpy.libs: the library numpy loaded), or None."""
    folder = Path(np.__file__).parent.parent / "numpy.libs"
    for path in sorted(glob.glob(str(folder / "*openblas*.so*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


@functools.cache
def _openblas_counts() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """The get and set of numpy's OpenBLAS thread count (its bundled library's symbols), or None."""
    lib = numpy_openblas()
    if lib is not None:
        # the getter of the Fortran interface (no arguments) is the cheaper call where it exists; the setter is C's
        for get, set_ in (("scipy_openblas_get_num_threads_64_", "scipy_openblas_set_num_threads64_"),
                          ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                          ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                          ("openblas_get_num_threads", "openblas_set_num_threads")):
            if hasattr(lib, get) and hasattr(lib, set_):
                getter, setter = getattr(lib, get), getattr(lib, set_)
                getter.restype, setter.argtypes = ctypes.c_int, [ctypes.c_int]
                return getter, setter
    return None
