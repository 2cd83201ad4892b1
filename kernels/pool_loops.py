"""The GIL-free side of the runtime's pool, compiled by numba (importing this module needs numba; it is imported by
name, so a trimmed runtime without numba never loads it).

A split product is a table of blocks, one row of int64 fields each (`FIELDS`): the sizes and addresses of one
`cblas_sgemm` call. The calling thread and the pool's workers claim blocks from one word of a shared control array
(the step's generation in its high 32 bits, the next block in its low 32) by compare-and-swap, call BLAS through
its function pointer, and count finished blocks on another word; no Python frame runs per block and neither thread
needs the GIL between the start of a step and its end. A worker waits for the next step by spinning on the control
word for a bounded number of `pause`s, then sleeps; the caller waits for blocks a worker claimed by spinning, then
sleeping, so that its core is free for that worker if the worker was waiting for one.

Control words (int64, each on a cache line of its own): CLAIM, DONE, COUNT, TABLE (the table's address), PY (the
generation of the pool's latest Python step: a worker in the compiled loop goes back to Python for it), WAITER (the
caller sleeps in `join`; the line's next words, OWN, OWN_US and WAITED_US, are the caller's account of its last step:
the blocks it ran, the µs they took and the µs it then waited for blocks a worker claimed, see `stats`), SYS
(libc's syscall() and SYS_futex, then the caller's futex timeout), TICKS (the cycle counter's ticks a µs, then how
many times a worker found itself preempted while it spun), then one SLEEP word per worker (it sleeps on it).
Sleeping and waking are futex calls made from the compiled loops (Linux), so a worker never takes the GIL to start
or finish a step; elsewhere a worker sleeps in Python and the caller wakes it there.
"""

from __future__ import annotations

import ctypes
import platform
import sys
import time

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LINE = 8  # int64 words per 64-byte cache line
CLAIM, DONE, COUNT, TABLE, PY, WAITER, SYS, TICKS, SLEEP = (i * LINE for i in range(9))
TIMEOUT = SYS + 2  # a struct timespec: the caller's futex sleep in `join`
OWN, OWN_US, WAITED_US = WAITER + 1, WAITER + 2, WAITER + 3  # the caller's account of its last step
FUTEX_WAIT, FUTEX_WAKE = 128, 129  # FUTEX_WAIT and FUTEX_WAKE with FUTEX_PRIVATE_FLAG
FUTEX_CALLS = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}  # SYS_futex
JOIN_SLEEP_NS = 1_000_000
SHORT_SPINS, PREEMPTED_US, BUSY_US = 100, 1000, 200_000
# one block: BLAS's function address, its integer width (32 or 64), transposes, sizes, addresses, leading dims
FN, WIDTH, TA, TB, M, N, K, A, LDA, B, LDB, C, LDC = range(13)
FIELDS = 16
ROW_MAJOR = 101
GEN = 1 << 32

jit = numba.njit(cache=True, nogil=True, error_model="numpy")
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def _word(context, builder, arrty, ary, index):  # noqa: ANN001, ANN202  (numba's code generation types)
    array = context.make_array(arrty)(context, builder, ary)
    return cgutils.get_item_pointer(context, builder, arrty, array, [index], wraparound=False)


@intrinsic
def load(typingctx, arr, index):  # noqa: ANN001, ANN201, ARG001
    """arr[index], an atomic (sequentially consistent) load of an int64 word."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        return builder.load_atomic(_word(context, builder, sig.args[0], args[0], args[1]), "seq_cst", 8)
    return types.int64(arr, index), codegen


@intrinsic
def store(typingctx, arr, index, value):  # noqa: ANN001, ANN201, ARG001
    """arr[index] = value, an atomic (sequentially consistent) store of an int64 word."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        builder.store_atomic(args[2], _word(context, builder, sig.args[0], args[0], args[1]), "seq_cst", 8)
        return context.get_dummy_value()
    return types.void(arr, index, types.int64), codegen


@intrinsic
def add(typingctx, arr, index, value):  # noqa: ANN001, ANN201, ARG001
    """arr[index] += value atomically; the word's value before."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        return builder.atomic_rmw("add", _word(context, builder, sig.args[0], args[0], args[1]), args[2], "seq_cst")
    return types.int64(arr, index, types.int64), codegen


@intrinsic
def swap_if(typingctx, arr, index, expected, value):  # noqa: ANN001, ANN201, ARG001
    """arr[index] = value if it holds expected (compare-and-swap); whether it did."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        ptr = _word(context, builder, sig.args[0], args[0], args[1])
        pair = builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)
    return types.boolean(arr, index, types.int64, types.int64), codegen


@intrinsic
def pause(typingctx):  # noqa: ANN001, ANN201, ARG001
    """The CPU's spin-wait hint (x86 `pause`; nothing elsewhere)."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        if _X86:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def sgemm(typingctx, fn, ta, tb, m, n, k, a, lda, b, ldb, c, ldc):  # noqa: ANN001, ANN201, ARG001, PLR0913
    """cblas_sgemm(row-major, ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, ldc) through its address fn; the sizes'
    integer type is the arguments' (int32 for an LP64 BLAS, int64 for an ILP64 one), addresses as int64."""
    sig = types.void(fn, ta, tb, m, n, k, a, lda, b, ldb, c, ldc)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        i32, f32 = ir.IntType(32), ir.FloatType()
        size = context.get_value_type(sig.args[3])
        addr = ir.IntType(64)
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, size, size, size, f32, addr, size, addr, size, f32,
                                               addr, size])
        call = builder.inttoptr(args[0], fnty.as_pointer())
        ta_, tb_ = (builder.trunc(v, i32) for v in args[1:3])
        one, zero = ir.Constant(f32, 1.0), ir.Constant(f32, 0.0)
        m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_ = args[3:]
        builder.call(call, [ir.Constant(i32, ROW_MAJOR), ta_, tb_, m_, n_, k_, one, a_, lda_, b_, ldb_, zero, c_,
                            ldc_])
        return context.get_dummy_value()
    return sig, codegen


@jit
def _block(table: np.ndarray, i: int) -> None:
    """Run block i of the table: one sgemm call."""
    r = table[i]
    if r[WIDTH] == 32:
        sgemm(r[FN], r[TA], r[TB], np.int32(r[M]), np.int32(r[N]), np.int32(r[K]), r[A], np.int32(r[LDA]), r[B],
              np.int32(r[LDB]), r[C], np.int32(r[LDC]))
    else:
        sgemm(r[FN], r[TA], r[TB], r[M], r[N], r[K], r[A], r[LDA], r[B], r[LDB], r[C], r[LDC])


@jit
def _claim_all(ctrl: np.ndarray, table: np.ndarray, gen: int, count: int) -> int:
    """Claim and run blocks of step `gen` until none is left (or another step began); how many it ran."""
    ran = 0
    while True:
        word = load(ctrl, CLAIM)
        i = word & (GEN - 1)
        if word - i != gen or i >= count:
            return ran
        if swap_if(ctrl, CLAIM, word, word + 1):
            _block(table, i)
            _finished(ctrl, count)
            ran += 1


@jit
def publish(ctrl: np.ndarray, table: np.ndarray, workers: int) -> int:
    """Start a step of table's blocks (the caller then runs `join`) and wake sleeping workers (by futex where the
    control words hold the system call, else the caller wakes them in Python): the new generation, negative when
    a worker must be woken in Python."""
    gen = ((load(ctrl, CLAIM) >> 32) % (1 << 30) + 1) << 32
    store(ctrl, DONE, 0)
    store(ctrl, OWN, 0)
    store(ctrl, WAITED_US, 0)
    store(ctrl, COUNT, table.shape[0])
    store(ctrl, TABLE, table.ctypes.data)
    store(ctrl, CLAIM, gen)
    return gen if wake(ctrl, workers) == 0 else -gen


@jit
def wake(ctrl: np.ndarray, workers: int) -> int:
    """Wake every sleeping worker: by futex where there is one; else how many must be woken in Python."""
    python = 0
    for w in range(workers):
        if load(ctrl, SLEEP + w * LINE) != 0 and swap_if(ctrl, SLEEP + w * LINE, 1, 0):
            if load(ctrl, SYS) != 0:
                _futex(ctrl, SLEEP + w * LINE, FUTEX_WAKE, 1, 0)
            else:
                python += 1
    return python


@jit
def join(ctrl: np.ndarray, table: np.ndarray, gen: int, patience: int) -> bool:
    """The caller's part of step gen: claim blocks until none is left, then wait for those the workers claimed:
    spinning `patience` pauses, then asleep on a futex (1 ms at a time) where there is one, so that a worker
    holding a block but waiting for a core can have this one. False when there is no futex and the blocks are
    still running after the spin (the caller yields its core in Python, then joins again). Its account of the step
    goes to OWN, OWN_US and WAITED_US (a join after a False adds its wait)."""
    count = table.shape[0]
    start = cycles()
    ran = _claim_all(ctrl, table, gen, count)
    mid = cycles()
    done = _wait(ctrl, count, patience)
    tick = max(1, load(ctrl, TICKS))
    if ran > 0:
        store(ctrl, OWN, ran)
        store(ctrl, OWN_US, (mid - start) // tick)
        store(ctrl, WAITED_US, (cycles() - mid) // tick)
    else:
        add(ctrl, WAITED_US, (cycles() - start) // tick)
    return done


@jit
def _wait(ctrl: np.ndarray, count: int, patience: int) -> bool:
    """Wait for the step's last blocks (see `join`)."""
    spins = 0
    while load(ctrl, DONE) < count:
        pause()
        spins += 1
        if spins > patience:
            if load(ctrl, SYS) == 0:
                return False
            store(ctrl, WAITER, 1)
            if load(ctrl, DONE) < count:
                _futex(ctrl, WAITER, FUTEX_WAIT, 1, ctrl.ctypes.data + TIMEOUT * 8)
            store(ctrl, WAITER, 0)
    return True


def stats(ctrl: np.ndarray) -> tuple[int, int, int]:
    """The caller's account of its last step: (blocks it ran, µs they took, µs it then waited for a worker's);
    zeros where there is no cycle counter."""
    return int(ctrl[OWN]), int(ctrl[OWN_US]), int(ctrl[WAITED_US])


@jit
def _finished(ctrl: np.ndarray, count: int) -> None:
    """Count a finished block; the last one wakes a caller asleep in `join`."""
    if add(ctrl, DONE, 1) + 1 == count and load(ctrl, WAITER) != 0 and swap_if(ctrl, WAITER, 1, 0):
        _futex(ctrl, WAITER, FUTEX_WAKE, 1, 0)


@jit
def run_all(table: np.ndarray) -> None:
    """Every block of the table on the calling thread."""
    for i in range(table.shape[0]):
        _block(table, i)


@jit
def generation(ctrl: np.ndarray) -> int:
    """The latest table step's generation."""
    word = load(ctrl, CLAIM)
    return word - (word & (GEN - 1))


@jit
def post(ctrl: np.ndarray, python_generation: int) -> None:
    """Post the pool's latest Python step: a worker in `serve` returns to Python for it."""
    store(ctrl, PY, python_generation)


@jit
def awake(ctrl: np.ndarray, worker: int) -> None:
    """Clear the worker's SLEEP word (it is back)."""
    store(ctrl, SLEEP + worker * LINE, 0)


def words(workers: int) -> np.ndarray:
    """A pool's control words for `workers` workers: the futex system call where this is a little-endian Linux
    whose libc exports syscall() (SYS 0 elsewhere: sleeping and waking go through Python)."""
    ctrl = np.zeros(SLEEP + LINE * max(1, workers), np.int64)
    number = FUTEX_CALLS.get(platform.machine().lower()) if sys.platform == "linux" and sys.byteorder == "little" \
        else None
    if number is not None:
        try:
            ctrl[SYS] = ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value or 0
        except (OSError, AttributeError):
            ctrl[SYS] = 0
        ctrl[SYS + 1], ctrl[TIMEOUT], ctrl[TIMEOUT + 1] = number, 0, JOIN_SLEEP_NS
    ctrl[TICKS] = ticks_per_us()
    return ctrl


@jit
def serve(ctrl: np.ndarray, seen: int, worker: int, patience: int, python_seen: int) -> int:
    """A worker's loop: run each new step's blocks; after a spin without a step, sleep on its SLEEP word (a futex;
    without one, return the last generation seen and sleep in Python until woken); returns, awake, when the pool
    posts a Python step other than python_seen. The spin is `patience` pauses, or SHORT_SPINS for BUSY_US after
    the worker finds it was preempted while spinning (a gap of PREEMPTED_US between two pauses: the cores are
    busy, and a spinning worker would take the caller's time)."""
    spins, me, tick = 0, SLEEP + worker * LINE, load(ctrl, TICKS)
    last = cycles()
    short_until = last
    while load(ctrl, PY) == python_seen:
        word = load(ctrl, CLAIM)
        gen = word - (word & (GEN - 1))
        if gen != seen:
            seen, spins = gen, 0
            count = load(ctrl, COUNT)
            _claim_all(ctrl, numba.carray(_int64_pointer(load(ctrl, TABLE)), (count, FIELDS)), gen, count)
            last = cycles()
            continue
        pause()
        spins += 1
        now = cycles()
        if tick > 0 and now - last > tick * PREEMPTED_US:
            short_until = now + tick * BUSY_US
            add(ctrl, TICKS + 1, 1)
        last = now
        if spins > (SHORT_SPINS if now < short_until else patience):
            spins = 0
            if not _sleep(ctrl, me, seen, python_seen):
                return seen
            last = cycles()
    return seen


@jit
def _sleep(ctrl: np.ndarray, me: int, seen: int, python_seen: int) -> bool:
    """Sleep on the worker's SLEEP word until woken (unless a step came meanwhile); False where there is no
    futex (the worker sleeps in Python)."""
    store(ctrl, me, 1)
    if generation(ctrl) != seen or load(ctrl, PY) != python_seen:
        store(ctrl, me, 0)
    elif load(ctrl, SYS) == 0:
        return False
    else:
        _futex(ctrl, me, FUTEX_WAIT, 1, 0)
        store(ctrl, me, 0)
    return True


@intrinsic
def cycles(typingctx):  # noqa: ANN001, ANN201, ARG001
    """The CPU's cycle counter (x86's time-stamp counter); 0 elsewhere (no preemption check)."""
    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        i64 = ir.IntType(64)
        if not _X86:
            return ir.Constant(i64, 0)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, []), "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.int64(), codegen


@jit
def _count_cycles(pauses: int) -> int:
    start = cycles()
    for _ in range(pauses):
        pause()
    return cycles() - start


def ticks_per_us() -> int:
    """The cycle counter's ticks a microsecond (0 where there is none): timed over about a millisecond."""
    if not _X86:
        return 0
    _count_cycles(1)
    t0 = time.perf_counter_ns()
    ticks = _count_cycles(20_000)
    elapsed = time.perf_counter_ns() - t0
    return max(0, ticks * 1000 // max(1, elapsed))


@intrinsic
def _syscall(typingctx, fn, number, a, b, c, d):  # noqa: ANN001, ANN201, ARG001, PLR0913
    """libc's syscall(number, a, b, c, d) through its address fn (all int64)."""
    sig = types.int64(fn, number, a, b, c, d)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(i64, [i64], var_arg=True)
        return builder.call(builder.inttoptr(args[0], fnty.as_pointer()), list(args[1:]))
    return sig, codegen


@jit
def _futex(ctrl: np.ndarray, word: int, op: int, value: int, timeout: int) -> None:
    """futex(&ctrl[word], op, value, timeout) (a process-private futex on the word's low 32 bits)."""
    _syscall(load(ctrl, SYS), ctrl[SYS + 1], ctrl.ctypes.data + word * 8, op, value, timeout)


@intrinsic
def _int64_pointer(typingctx, addr):  # noqa: ANN001, ANN201, ARG001
    """An int64 address as a pointer to int64 (for numba.carray)."""
    ptr = types.CPointer(types.int64)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        return builder.inttoptr(args[0], context.get_value_type(ptr))
    return ptr(types.int64), codegen
