"""The GIL-free side of the runtime's pool, compiled by numba (importing this module needs numba; it is imported by
name, so a trimmed runtime without numba never loads it).

A split product is a table of blocks, one row of int64 fields each (`FIELDS`): the sizes and addresses of one
`cblas_sgemm` call. The calling thread and the pool's workers claim blocks from one word of a shared control array
(the step's generation in its high 32 bits, the next block in its low 32) by compare-and-swap, call BLAS through
its function pointer, and count finished blocks on another word; no Python frame runs per block and neither thread
needs the GIL between the start of a step and its end. A worker waits for the next step by spinning on the control
word for a bounded number of `pause`s, then returns to Python to sleep (its SLEEP word set: the caller wakes it).

Control words (int64, each on a cache line of its own): CLAIM, DONE, COUNT, TABLE (the table's address), PY (the
generation of the pool's latest Python step: a spinning worker goes back to Python for it), then one SLEEP word
per worker.
"""

from __future__ import annotations

import platform

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LINE = 8  # int64 words per 64-byte cache line
CLAIM, DONE, COUNT, TABLE, PY, SLEEP = (i * LINE for i in range(6))
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
def _claim_all(ctrl: np.ndarray, table: np.ndarray, gen: int, count: int) -> None:
    """Claim and run blocks of step `gen` until none is left (or another step began)."""
    while True:
        word = load(ctrl, CLAIM)
        i = word & (GEN - 1)
        if word - i != gen or i >= count:
            return
        if swap_if(ctrl, CLAIM, word, word + 1):
            _block(table, i)
            add(ctrl, DONE, 1)


@jit
def publish(ctrl: np.ndarray, table: np.ndarray, workers: int) -> int:
    """Start a step of table's blocks (the caller then runs `join`): the new generation; a negative one when a
    worker sleeps and must be woken."""
    gen = ((load(ctrl, CLAIM) >> 32) % (1 << 30) + 1) << 32
    store(ctrl, DONE, 0)
    store(ctrl, COUNT, table.shape[0])
    store(ctrl, TABLE, table.ctypes.data)
    store(ctrl, CLAIM, gen)
    for w in range(workers):
        if load(ctrl, SLEEP + w * LINE) != 0:
            return -gen
    return gen


@jit
def join(ctrl: np.ndarray, table: np.ndarray, gen: int, patience: int) -> bool:
    """The caller's part of step gen: claim blocks until none is left, then wait (spinning) for those the workers
    claimed; False after `patience` pauses with a block still running (the caller yields its core, then joins
    again)."""
    count = table.shape[0]
    _claim_all(ctrl, table, gen, count)
    spins = 0
    while load(ctrl, DONE) < count:
        pause()
        spins += 1
        if spins > patience:
            return False
    return True


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
def awake(ctrl: np.ndarray, worker: int) -> None:
    """Clear the worker's SLEEP word (it is back)."""
    store(ctrl, SLEEP + worker * LINE, 0)


def words(workers: int) -> int:
    """The size of a pool's control array for `workers` workers."""
    return SLEEP + LINE * max(1, workers)


@jit
def serve(ctrl: np.ndarray, seen: int, worker: int, patience: int, python_seen: int) -> int:
    """A worker's loop: run each new step's blocks; after `patience` pauses without a step, mark itself asleep and
    return the last generation seen (the Python side sleeps until woken); returns at once, awake, when the pool
    posts a Python step other than python_seen."""
    spins = 0
    while load(ctrl, PY) == python_seen:
        word = load(ctrl, CLAIM)
        gen = word - (word & (GEN - 1))
        if gen != seen:
            seen, spins = gen, 0
            count = load(ctrl, COUNT)
            table = numba.carray(_int64_pointer(load(ctrl, TABLE)), (count, FIELDS))
            _claim_all(ctrl, table, gen, count)
            continue
        pause()
        spins += 1
        if spins > patience:
            store(ctrl, SLEEP + worker * LINE, 1)
            word = load(ctrl, CLAIM)
            if word - (word & (GEN - 1)) == seen:
                return seen
            store(ctrl, SLEEP + worker * LINE, 0)
            spins = 0
    return seen


@intrinsic
def _int64_pointer(typingctx, addr):  # noqa: ANN001, ANN201, ARG001
    """An int64 address as a pointer to int64 (for numba.carray)."""
    ptr = types.CPointer(types.int64)

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        return builder.inttoptr(args[0], context.get_value_type(ptr))
    return ptr(types.int64), codegen
